//! The `corral` binary: everything lives in the library (`corral::cli`).

fn main() -> std::process::ExitCode {
    corral::cli::main()
}
