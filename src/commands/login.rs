//! `yy login`, `yy logout`, `yy whoami`.

use clap::Args;

use super::context::{self, StoredLogin};
use crate::api::client::Client;
use crate::api::params;
use crate::error::CliError;
use crate::output;

#[derive(Debug, Args)]
pub struct LoginArgs {
    /// The server, e.g. http://127.0.0.1:8420
    pub url: String,
    /// Account name
    #[arg(long)]
    pub username: String,
    /// Read the password from stdin instead of a terminal prompt
    #[arg(long)]
    pub password_stdin: bool,
}

#[derive(Debug, Args)]
pub struct WhoamiArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

pub async fn login(args: LoginArgs) -> anyhow::Result<()> {
    crate::api::names::check_http_url("server URL", &args.url).map_err(CliError::usage)?;
    let password = super::prompt::password(args.password_stdin, false)?;
    let client = Client::new(&args.url, None)?;
    let result = client
        .login(&params::LoginParams {
            username: args.username.clone(),
            password,
        })
        .await?;
    // Replacing an older login: revoke its token so it does not linger on the server.
    if let Ok(Some(old)) = context::load_login()
        && let Ok(old_client) = Client::new(&old.server, Some(old.token))
    {
        let _ = old_client.logout().await;
    }
    let path = context::save_login(&StoredLogin {
        server: client.base_url().to_string(),
        username: result.account.username.clone(),
        token: result.token,
    })?;
    output::print(&format!(
        "logged in to {} as {} (token stored in {})",
        client.base_url(),
        result.account.username,
        path.display()
    ))?;
    Ok(())
}

pub async fn logout() -> anyhow::Result<()> {
    let Some(stored) = context::load_login()? else {
        return Err(CliError::new(crate::error::Exit::Auth, "not logged in; nothing to do").into());
    };
    let client = Client::new(&stored.server, Some(stored.token.clone()))?;
    match client.logout().await {
        Ok(_) => {}
        // Already revoked on the server: forgetting it locally is all that is left.
        Err(e) if e.status() == Some(401) => {}
        Err(e) => {
            return Err(anyhow::Error::new(e).context(
                "could not revoke the token on the server (it is still stored; try again)",
            ));
        }
    }
    context::forget_login()?;
    output::print(&format!("logged out of {}", stored.server))?;
    Ok(())
}

pub async fn whoami(args: WhoamiArgs) -> anyhow::Result<()> {
    let client = context::client()?;
    let me = client.whoami().await?;
    if args.json {
        return output::json(&me);
    }
    output::show(
        &me,
        false,
        vec![
            ("username", me.account.username.clone()),
            ("admin", me.account.admin.to_string()),
            ("server", client.base_url().to_string()),
            ("account id", me.account.id.clone()),
            ("token id", me.token_id.clone()),
        ],
    )
}
