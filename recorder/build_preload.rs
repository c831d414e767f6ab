//! Build script shared by `preload-openmpi` and `preload-mpich`: generates the C layer from
//! `mpi_functions.tsv`, compiles it against the MPI named by the package (its compiler wrapper's
//! `-show` gives the headers and libraries) and links libmpi into the cdylib.
//!
//! Without that MPI the build still succeeds: it warns and produces an inert library (the Rust core
//! only, exporting no MPI symbols), so `cargo build` works on machines with one MPI.
//! Override the compiler wrapper with EVENFLUSH_OPENMPI_CC / EVENFLUSH_MPICH_CC.

#[path = "codegen/gen.rs"]
mod generator;

use std::path::{Path, PathBuf};
use std::process::Command;

struct Flags {
    includes: Vec<PathBuf>,
    lib_dirs: Vec<String>,
    libs: Vec<String>,
}

fn mpi_flags(cc: &str) -> Result<Flags, String> {
    let out = Command::new(cc)
        .arg("-show")
        .output()
        .map_err(|e| format!("cannot run `{cc} -show`: {e}"))?;
    if !out.status.success() {
        return Err(format!("`{cc} -show` failed"));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut flags = Flags {
        includes: Vec::new(),
        lib_dirs: Vec::new(),
        libs: Vec::new(),
    };
    for tok in text.split_whitespace() {
        if let Some(p) = tok.strip_prefix("-I") {
            flags.includes.push(PathBuf::from(p));
        } else if let Some(p) = tok.strip_prefix("-L") {
            flags.lib_dirs.push(p.to_string());
        } else if let Some(l) = tok.strip_prefix("-l") {
            flags.libs.push(l.to_string());
        }
    }
    if flags.libs.is_empty() {
        return Err(format!("`{cc} -show` names no MPI library"));
    }
    Ok(flags)
}

/// Makes cargo run this script again when the MPI appears, changes or goes. Without it, a library
/// built before the MPI was installed stayed inert until a clean build, with no word at the next
/// `cargo build`. Watched: the compiler wrapper where it is found, else each directory it could
/// appear in. Not the missing file itself: a package installs it with the package's old date,
/// which cargo takes for unchanged, while the directory's date moves. `mpi.h` is watched once the
/// wrapper names its include directories.
fn watch_the_mpi(cc: &str) {
    let candidates: Vec<PathBuf> = if cc.contains('/') {
        vec![PathBuf::from(cc)]
    } else {
        std::env::var_os("PATH")
            .map(|path| std::env::split_paths(&path).map(|d| d.join(cc)).collect())
            .unwrap_or_default()
    };
    if let Some(found) = candidates.iter().find(|p| p.is_file()) {
        println!("cargo:rerun-if-changed={}", found.display());
        return;
    }
    for dir in candidates.iter().filter_map(|p| p.parent()) {
        if dir.is_dir() {
            println!("cargo:rerun-if-changed={}", dir.display());
        }
    }
}

fn out_dir_path() -> PathBuf {
    PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"))
}

/// `mpi.h` (and, for Open MPI, `mpi-ext.h`, which declares its `MPIX_` functions) after the
/// preprocessor: the prototypes this MPI really has.
fn preprocessed_headers(cc: &str, marker: &str) -> Result<String, String> {
    use std::io::Write as _;
    let mut source = String::from("#include <mpi.h>\n");
    if marker == "OPEN_MPI" {
        source.push_str("#include <mpi-ext.h>\n");
    }
    let mut child = Command::new(cc)
        .args(["-E", "-x", "c", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run `{cc} -E`: {e}"))?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(source.as_bytes())
        .map_err(|e| format!("`{cc} -E`: {e}"))?;
    let out = child
        .wait_with_output()
        .map_err(|e| format!("`{cc} -E`: {e}"))?;
    if !out.status.success() {
        return Err(format!("`{cc} -E` cannot preprocess mpi.h"));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn main() {
    let pkg = std::env::var("CARGO_PKG_NAME").unwrap_or_default();
    let (flavour, cc_var, default_cc, marker) = if pkg.ends_with("openmpi") {
        ("openmpi", "EVENFLUSH_OPENMPI_CC", "mpicc", "OPEN_MPI")
    } else {
        ("mpich", "EVENFLUSH_MPICH_CC", "mpicc.mpich", "MPICH")
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    let recorder_dir = root
        .parent()
        .expect("package lives under recorder/")
        .to_path_buf();
    for f in [
        "mpi_functions.tsv",
        "codegen",
        "csrc/evf_runtime.c",
        "csrc/evf_transport.c",
        "csrc/evf_runtime.h",
        "csrc/evf_job.c",
        "build_preload.rs",
    ] {
        println!("cargo:rerun-if-changed={}", recorder_dir.join(f).display());
    }
    println!("cargo:rerun-if-env-changed={cc_var}");
    let cc = std::env::var(cc_var).unwrap_or_else(|_| default_cc.to_string());
    watch_the_mpi(&cc);

    let flags = match mpi_flags(&cc) {
        Ok(f) => f,
        Err(e) => {
            println!(
                "cargo:warning=evenflush {flavour}: {e}; building an inert library (no MPI wrappers)"
            );
            return;
        }
    };

    for dir in &flags.includes {
        let header = dir.join("mpi.h");
        if header.is_file() {
            println!("cargo:rerun-if-changed={}", header.display());
        }
    }

    let tsv = std::fs::read_to_string(recorder_dir.join("mpi_functions.tsv"))
        .expect("read mpi_functions.tsv");
    let funcs = generator::parse(&tsv).unwrap_or_else(|e| panic!("mpi_functions.tsv: {e}"));
    // The table spans MPI-4; each MPI gets the rows its headers declare.
    let declared = match preprocessed_headers(&cc, marker) {
        Ok(text) => text,
        Err(e) => {
            println!(
                "cargo:warning=evenflush {flavour}: {e}; building an inert library (no MPI wrappers)"
            );
            return;
        }
    };
    let available = |f: &generator::Func| generator::declared_in(&declared, f);
    let skipped: Vec<&str> = funcs
        .iter()
        .filter(|f| !available(f))
        .map(|f| f.name.as_str())
        .collect();
    std::fs::write(out_dir_path().join("not_declared.txt"), skipped.join("\n"))
        .expect("write list of rows the MPI lacks");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let generated = out_dir.join("evf_wrappers.c");
    let mut c = format!(
        "#include <mpi.h>\n#ifndef {marker}\n#error \"{cc} does not give {flavour}'s mpi.h\"\n#endif\n"
    );
    c.push_str(&generator::c_layer(&funcs, &available));
    std::fs::write(&generated, c).expect("write generated C layer");

    let mut build = cc::Build::new();
    build
        .file(recorder_dir.join("csrc/evf_runtime.c"))
        .file(recorder_dir.join("csrc/evf_transport.c"))
        .file(recorder_dir.join("csrc/evf_job.c"))
        .file(&generated)
        .include(recorder_dir.join("csrc"))
        .includes(&flags.includes)
        .opt_level(2)
        .pic(true)
        .extra_warnings(false)
        .flag("-fvisibility=default")
        .link_lib_modifier("+whole-archive");
    if let Err(e) = build.try_compile(&format!("evf_c_{flavour}")) {
        println!(
            "cargo:warning=evenflush {flavour}: compiling the C layer failed ({e}); building an inert library"
        );
        return;
    }

    // libmpi is linked explicitly (not as-needed): the library is loaded into every process that
    // inherits LD_PRELOAD, and cdylibs bind symbols immediately, so unresolved PMPI_* would kill
    // mpirun/orted/hydra/bash (feasibility.md).
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-as-needed");
    for d in &flags.lib_dirs {
        println!("cargo:rustc-cdylib-link-arg=-L{d}");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,{d}");
    }
    for l in &flags.libs {
        println!("cargo:rustc-cdylib-link-arg=-l{l}");
    }
    println!("cargo:rustc-cdylib-link-arg=-Wl,--as-needed");
    let map = out_dir.join("exports.map");
    std::fs::write(
        &map,
        "{ global: MPI_*; MPIX_*; mpi_*; mpix_*; evenflush_*; };\n",
    )
    .expect("write version script");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
}
