//! Questions to a person, only ever on a terminal; every question has a flag for scripts.

use std::io::{IsTerminal, Read};

use crate::error::{CliError, Exit};

/// Reads a password: from stdin with `--password-stdin`, else from a terminal prompt.
pub fn password(from_stdin: bool, confirm: bool) -> anyhow::Result<String> {
    if from_stdin {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| CliError::usage(format!("cannot read the password from stdin: {e}")))?;
        let password = text.strip_suffix('\n').unwrap_or(&text);
        let password = password.strip_suffix('\r').unwrap_or(password);
        if password.is_empty() {
            return Err(CliError::usage("--password-stdin read an empty password").into());
        }
        return Ok(password.to_string());
    }
    if !std::io::stdin().is_terminal() {
        return Err(CliError::usage(
            "no terminal to ask for the password: pipe it in with --password-stdin",
        )
        .into());
    }
    let first = rpassword::prompt_password("Password: ")?;
    if confirm {
        let second = rpassword::prompt_password("Password again: ")?;
        if first != second {
            return Err(CliError::usage("the two passwords differ; nothing was changed").into());
        }
    }
    Ok(first)
}

/// Reads the current and the new password from stdin (`--password-stdin`): with
/// `with_current`, the first line is the current password and the second the new one.
pub fn passwords_stdin(with_current: bool) -> anyhow::Result<(Option<String>, String)> {
    if !with_current {
        return Ok((None, password(true, false)?));
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| CliError::usage(format!("cannot read the passwords from stdin: {e}")))?;
    let mut lines = text.lines();
    match (lines.next(), lines.next()) {
        (Some(current), Some(new)) if !current.is_empty() && !new.is_empty() => {
            Ok((Some(current.to_string()), new.to_string()))
        }
        _ => Err(CliError::usage(
            "--password-stdin needs two lines: the current password, then the new one",
        )
        .into()),
    }
}

/// One password typed on a terminal.
pub fn password_prompt(label: &str) -> anyhow::Result<String> {
    if !std::io::stdin().is_terminal() {
        return Err(CliError::usage(
            "no terminal to ask for the password: pipe it in with --password-stdin",
        )
        .into());
    }
    Ok(rpassword::prompt_password(label)?)
}

/// Asks "question [y/N]" on a terminal unless `yes` was given. Without a terminal and
/// without `--yes`, refuses rather than guessing.
pub fn confirm(question: &str, yes: bool) -> anyhow::Result<()> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return Err(CliError::usage(format!(
            "there is no terminal to ask \"{question}\": pass --yes to confirm"
        ))
        .into());
    }
    eprint!("{question} [y/N] ");
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    if matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
        Ok(())
    } else {
        Err(CliError::new(Exit::Cancelled, "cancelled; nothing was changed").into())
    }
}
