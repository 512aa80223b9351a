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
    let mut ask = dialoguer::Password::new().with_prompt("Password");
    if confirm {
        // A new password: checked for length before it is asked a second time.
        ask = ask
            .validate_with(|p: &String| crate::server::auth::check_password(p))
            .with_confirmation("Password again", "the two passwords differ; try again");
    }
    Ok(ask.interact().map_err(prompt_error)?)
}

/// A prompt that could not be shown or answered (the terminal went away, Ctrl-C).
fn prompt_error(e: dialoguer::Error) -> CliError {
    CliError::new(
        Exit::Cancelled,
        format!("no answer ({e}); nothing was changed"),
    )
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
    let label = label.trim_end().trim_end_matches(':');
    Ok(dialoguer::Password::new()
        .with_prompt(label)
        .interact()
        .map_err(prompt_error)?)
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
    let yes = dialoguer::Confirm::new()
        .with_prompt(question)
        .default(false)
        .interact_on(&dialoguer::console::Term::stderr())
        .map_err(prompt_error)?;
    if yes {
        Ok(())
    } else {
        Err(CliError::new(Exit::Cancelled, "cancelled; nothing was changed").into())
    }
}
