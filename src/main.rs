//! The `ptemu` command line.

mod cli;

fn main() -> std::process::ExitCode {
    cli::run()
}
