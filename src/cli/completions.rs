//! `corral completions SHELL`: prints a completion script for SHELL (bash, zsh, fish, elvish,
//! powershell), generated from the command line's own definition.

use clap::CommandFactory;

use super::{Cli, CliError, Context, Exit};

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell the script is for.
    pub shell: clap_complete::Shell,
}

pub fn execute(_context: &Context, args: &CompletionsArgs) -> Result<Exit, CliError> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "corral", &mut script);
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(&script).and_then(|_| stdout.flush()) {
        // The reader stopped reading (`| head`): it had what it wanted.
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(CliError::failure(format!("writing the script: {error}")))
        }
        _ => Ok(Exit::success()),
    }
}
