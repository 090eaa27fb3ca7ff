//! `ncclprobe completions SHELL` and `ncclprobe man [COMMAND]`: generated from the same clap
//! definition the parser uses (clap_complete, clap_mangen), so neither can drift from the flags.

use crate::exit::{ExitCode, Failure};
use clap::CommandFactory;

/// The completion script for `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) -> Result<ExitCode, Failure> {
    let mut cmd = crate::cli::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "ncclprobe", &mut out);
    crate::exit::print(&String::from_utf8_lossy(&out))?;
    Ok(ExitCode::Ok)
}

/// The roff page of ncclprobe, or of `path` (`["simulate", "ddp"]`), on stdout.
pub fn man(path: &[String]) -> Result<ExitCode, Failure> {
    let mut cmd = crate::cli::Cli::command();
    cmd.build();
    let mut page = cmd.clone();
    let mut name = String::from("ncclprobe");
    for word in path {
        let names: Vec<String> = page
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        let Some(sub) = page.find_subcommand(word).cloned() else {
            let listed: Vec<&str> = names.iter().map(String::as_str).collect();
            return Err(Failure::usage(format!(
                "man: no command `{name} {word}`{}; commands: {}",
                crate::flags::did_you_mean(word, &listed),
                names.join(", ")
            )));
        };
        name = format!("{name}-{}", sub.get_name());
        page = sub;
    }
    // Built, each command has its display name (`ncclprobe-simulate-ddp`) and bin name.
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .map_err(|e| Failure::internal(format!("man: {e}")))?;
    crate::exit::print(&String::from_utf8_lossy(&out))?;
    Ok(ExitCode::Ok)
}
