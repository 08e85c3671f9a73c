//! The `corral` binary: everything lives in the library (`corral::cli`).
//!
//! Run under the name `corral-fake-engine` (a link to it), it is the fake engine: `corral
//! demo` makes such a link when that binary is not installed beside this one, as after a
//! plain `cargo run --release -- demo`, which builds this binary alone.

#[path = "corral-fake-engine/main.rs"]
mod fake_engine;

fn main() -> std::process::ExitCode {
    let invoked = std::env::args_os().next().map(std::path::PathBuf::from);
    if invoked
        .as_deref()
        .and_then(std::path::Path::file_name)
        .is_some_and(|name| name == corral::EngineKind::Fake.default_program())
    {
        fake_engine::main();
        return std::process::ExitCode::SUCCESS;
    }
    corral::cli_main()
}
