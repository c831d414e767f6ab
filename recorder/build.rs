//! Generates the function-name table of the Rust core from `mpi_functions.tsv`.

#[path = "codegen/gen.rs"]
mod generator;

fn main() {
    println!("cargo:rerun-if-changed=mpi_functions.tsv");
    println!("cargo:rerun-if-changed=codegen");
    let tsv = std::fs::read_to_string("mpi_functions.tsv").expect("read mpi_functions.tsv");
    let funcs = match generator::parse(&tsv) {
        Ok(f) => f,
        Err(e) => panic!("mpi_functions.tsv: {e}"),
    };
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    std::fs::write(out.join("function_table.rs"), generator::rust_table(&funcs))
        .expect("write table");
    std::fs::write(out.join("FUNCTIONS.md"), generator::functions_md(&funcs)).expect("write md");
}
