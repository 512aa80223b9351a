fn main() {
    std::process::exit(yy::commands::main());
}
