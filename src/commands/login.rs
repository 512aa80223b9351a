//! `yy login`, `yy logout`, `yy whoami`.

use std::io::IsTerminal;

use clap::Args;

use super::context::{self, StoredLogin};
use crate::api::params;
use crate::client::Client;
use crate::error::CliError;
use crate::output;

#[derive(Debug, Args)]
pub struct LoginArgs {
    /// The server, e.g. https://yy.example.com:8420 (plain http:// only to a loopback
    /// address such as http://127.0.0.1:8420)
    pub url: String,
    /// Other replicas of the same server (`yy serve` on one database, with the same
    /// certificate): commands move on to the next when one cannot be reached
    #[arg(value_name = "REPLICA_URL")]
    pub replicas: Vec<String>,
    /// Account name
    #[arg(long)]
    pub username: String,
    /// Read the password from stdin instead of a terminal prompt
    #[arg(long)]
    pub password_stdin: bool,
    /// Trust the server's self-signed certificate with this SHA-256 fingerprint (as
    /// `yy serve` prints it) without asking; also accepts a replaced certificate
    #[arg(long, value_name = "SHA256", value_parser = parse_pin)]
    pub cert_sha256: Option<String>,
}

fn parse_pin(s: &str) -> Result<String, String> {
    crate::api::tls::parse_fingerprint(s)
}

#[derive(Debug, Args)]
pub struct WhoamiArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

pub async fn login(args: LoginArgs) -> anyhow::Result<()> {
    let example = crate::api::names::SERVER_URL_EXAMPLE;
    crate::api::names::check_http_url("server URL", &args.url, example).map_err(CliError::usage)?;
    let url = reqwest::Url::parse(&args.url).map_err(|e| CliError::usage(e.to_string()))?;
    let replicas = check_replicas(&url, &args.replicas)?;
    let previous = context::load_login().ok().flatten();
    let pin = trusted_certificate(&url, &args, previous.as_ref()).await?;
    let password = super::prompt::password(args.password_stdin, false)?;
    let client = Client::pinned(&args.url, None, pin.as_deref())?;
    let result = client
        .login(&params::LoginParams {
            username: args.username.clone(),
            password,
        })
        .await?;
    // Replacing an older login: revoke its token so it does not linger on the server.
    if let Some(old) = previous
        && let Ok(old_client) =
            Client::pinned(&old.server, Some(old.token), old.cert_sha256.as_deref())
    {
        let _ = old_client.logout().await;
    }
    let path = context::save_login(&StoredLogin {
        server: client.base_url().to_string(),
        username: result.account.username.clone(),
        token: result.token,
        cert_sha256: pin,
        replicas,
    })?;
    output::print(&format!(
        "logged in to {} as {} (token stored in {})",
        client.base_url(),
        result.account.username,
        path.display()
    ))?;
    Ok(())
}

/// True for a plain http:// URL whose host is not a loopback address literal.
fn plain_http_off_loopback(url: &reqwest::Url) -> bool {
    url.scheme() == "http"
        && !url
            .host()
            .is_some_and(|h| crate::runner::config::is_loopback_literal(&h))
}

/// The replicas named after `url`, checked: each reached like `url` (plain http:// only to
/// loopback), none named twice.
fn check_replicas(url: &reqwest::Url, replicas: &[String]) -> Result<Vec<String>, CliError> {
    let example = crate::api::names::SERVER_URL_EXAMPLE;
    let mut seen = vec![url.as_str().trim_end_matches('/').to_string()];
    for raw in replicas {
        crate::api::names::check_http_url("replica URL", raw, example).map_err(CliError::usage)?;
        let replica = reqwest::Url::parse(raw).map_err(|e| CliError::usage(e.to_string()))?;
        if replica.scheme() != url.scheme() {
            return Err(CliError::usage(format!(
                "replica {raw} is {}:// and {url} is {}://: reach every replica the same way",
                replica.scheme(),
                url.scheme()
            )));
        }
        if plain_http_off_loopback(&replica) {
            return Err(CliError::usage(format!(
                "replica {raw} is plain http:// to an address that is not loopback: the token would cross the network readable; use https://"
            )));
        }
        let shown = replica.as_str().trim_end_matches('/').to_string();
        if seen.contains(&shown) {
            return Err(CliError::usage(format!("{raw} is named twice")));
        }
        seen.push(shown);
    }
    Ok(seen.split_off(1))
}

/// The certificate fingerprint to pin for `url`, decided before any password is sent:
/// none over plain HTTP (loopback only) or for a CA-issued certificate; else `--cert-sha256`,
/// the one pinned at an earlier login (a different one is refused), or the operator's yes
/// on a terminal to the fingerprint shown.
async fn trusted_certificate(
    url: &reqwest::Url,
    args: &LoginArgs,
    previous: Option<&StoredLogin>,
) -> anyhow::Result<Option<String>> {
    if url.scheme() == "http" {
        if plain_http_off_loopback(url) {
            return Err(CliError::usage(format!(
                "{} is plain http:// to an address that is not loopback: the password would cross the network readable; use https:// (`yy serve --tls self-signed`)",
                args.url
            ))
            .into());
        }
        if args.cert_sha256.is_some() {
            return Err(CliError::usage("--cert-sha256 needs an https:// server URL").into());
        }
        return Ok(None);
    }
    let seen = crate::api::tls::probe(url)
        .await
        .map_err(|e| CliError::failure(e.to_string()))?;
    let presented = seen.fingerprint.unwrap_or_default();
    if let Some(pin) = &args.cert_sha256 {
        if *pin != presented && !seen.ca_issued {
            return Err(CliError::new(
                crate::error::Exit::Auth,
                format!(
                    "the certificate of {} has SHA-256 {presented}, not the --cert-sha256 {pin}: nothing was sent; check the fingerprint `yy serve` printed",
                    args.url
                ),
            )
            .into());
        }
        return Ok(Some(pin.clone()));
    }
    let server = url.as_str().trim_end_matches('/');
    let pinned = previous
        .filter(|l| l.server.trim_end_matches('/') == server)
        .and_then(|l| l.cert_sha256.clone());
    match pinned {
        Some(old) if old == presented => return Ok(Some(old)),
        Some(old) if !seen.ca_issued => {
            return Err(CliError::new(
                crate::error::Exit::Auth,
                crate::api::http::changed_certificate(server, &old, &presented),
            )
            .into());
        }
        _ => {}
    }
    if seen.ca_issued {
        return Ok(None);
    }
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return Err(CliError::new(
            crate::error::Exit::Auth,
            format!(
                "the certificate of {server} is not issued by a trusted CA; its SHA-256 is {presented}: if that is the fingerprint `yy serve` printed, pass --cert-sha256 {presented}"
            ),
        )
        .into());
    }
    eprintln!(
        "The certificate of {server} is not issued by a trusted CA.\nIts SHA-256 fingerprint is {presented}\nCompare it with the one `yy serve` printed at its start."
    );
    super::prompt::confirm("Trust this certificate for this server?", false)?;
    Ok(Some(presented))
}

pub async fn logout() -> anyhow::Result<()> {
    let Some(stored) = context::load_login()? else {
        return Err(CliError::new(crate::error::Exit::Auth, "not logged in; nothing to do").into());
    };
    let client = Client::pinned(
        &stored.server,
        Some(stored.token.clone()),
        stored.cert_sha256.as_deref(),
    )?;
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

#[cfg(test)]
mod tests {
    use super::check_replicas;

    #[test]
    fn replicas_are_reached_like_the_server_and_named_once() {
        let https = reqwest::Url::parse("https://a.example:8420").unwrap();
        let ok = check_replicas(&https, &["https://b.example:8420/".into()]).unwrap();
        assert_eq!(ok, ["https://b.example:8420"]);
        for (bad, says) in [
            ("http://127.0.0.1:8420", "the same way"),
            ("https://a.example:8420/", "named twice"),
            ("ftp://b.example", "replica URL"),
        ] {
            let e = check_replicas(&https, &[bad.into()])
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let http = reqwest::Url::parse("http://127.0.0.1:8420").unwrap();
        assert!(check_replicas(&http, &["http://127.0.0.2:8420".into()]).is_ok());
        let e = check_replicas(&http, &["http://10.1.2.3:8420".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("not loopback"), "{e}");
    }
}
