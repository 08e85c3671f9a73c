//! The `corral-shim` binary: the process every engine child runs under (`corral::process::shim`).

fn main() {
    std::process::exit(corral::shim_main(std::env::args_os().skip(1).collect()));
}
