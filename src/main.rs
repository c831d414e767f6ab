fn main() {
    println!("evenflush: placeholder");
}
