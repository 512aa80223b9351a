//! The browser tools' actions, by Hermes's tool names and arguments: what a granted call
//! does in its agent's context, and what goes back to the model (text, and a PNG for a
//! screenshot, as the Worker's screen tools hand images over).

use base64::Engine as _;
use serde_json::{Value, json};

use super::ManagedBrowser;
use crate::browser::contexts::Context;
use crate::browser::{BrowserError, Scroll, Snapshot, printable};

/// What a call answers.
pub struct Done {
    pub text: String,
    pub png: Option<Vec<u8>>,
}

impl Done {
    fn text(text: impl Into<String>) -> Done {
        Done {
            text: text.into(),
            png: None,
        }
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({ "ok": true, "text": self.text });
        if let Some(png) = &self.png {
            v["png_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(png));
        }
        v
    }
}

fn page_error(m: impl Into<String>) -> BrowserError {
    BrowserError::Page(m.into())
}

fn arg<'a>(args: &'a Value, name: &str) -> Result<&'a str, BrowserError> {
    args[name]
        .as_str()
        .ok_or_else(|| page_error(format!("the argument {name:?} (a string) is missing")))
}

/// Only web pages: no file:, data:, javascript: or chrome: URLs.
/// A bare host (`example.org/report`, as models often write it) is taken as https.
fn web_url(url: &str) -> Result<String, BrowserError> {
    let parsed = match url::Url::parse(url) {
        Err(url::ParseError::RelativeUrlWithoutBase) if !url.contains(char::is_whitespace) => {
            url::Url::parse(&format!("https://{url}"))
        }
        other => other,
    };
    match parsed {
        Ok(u) if matches!(u.scheme(), "http" | "https") => Ok(u.to_string()),
        Ok(u) => Err(page_error(format!(
            "{} URLs are not opened: give an http:// or https:// address",
            u.scheme()
        ))),
        Err(e) => Err(page_error(format!(
            "{:?} is not a URL ({e}): give an http:// or https:// address",
            printable(url, 200)
        ))),
    }
}

/// Runs tool `tool` for `agent`, whose turn was granted its browser.
pub async fn run(
    browser: &ManagedBrowser,
    agent: &str,
    tool: &str,
    args: &Value,
) -> Result<Done, BrowserError> {
    // Known before anything opens: an unknown name opens no browser.
    let known = [
        "browser_navigate",
        "browser_snapshot",
        "browser_click",
        "browser_type",
        "browser_scroll",
        "browser_back",
        "browser_press",
        "browser_vision",
        "browser_screenshot",
        "browser_tabs",
    ];
    if !known.contains(&tool) {
        return Err(page_error(format!(
            "{:?} is not a tool of the managed browser",
            printable(tool, 60)
        )));
    }
    let ctx = browser.authorize(agent).await?;
    let page = &ctx.browser;
    match tool {
        "browser_navigate" => {
            let url = web_url(arg(args, "url")?)?;
            let since = crate::timefmt::now_ms();
            opened(&ctx, since, &url, page.navigate(&url).await).await
        }
        "browser_snapshot" => Ok(Done::text(snapshot_text(&page.snapshot().await?))),
        "browser_click" => {
            page.click(arg(args, "ref")?).await?;
            Ok(Done::text("clicked"))
        }
        "browser_type" => {
            page.type_text(arg(args, "ref")?, arg(args, "text")?)
                .await?;
            Ok(Done::text("typed"))
        }
        "browser_scroll" => {
            let direction = match arg(args, "direction")? {
                "up" => Scroll::Up,
                "down" => Scroll::Down,
                other => {
                    return Err(page_error(format!(
                        "direction {:?}: give up or down",
                        printable(other, 20)
                    )));
                }
            };
            page.scroll(direction).await?;
            Ok(Done::text("scrolled"))
        }
        "browser_back" => {
            let since = crate::timefmt::now_ms();
            opened(&ctx, since, "", page.back().await).await
        }
        "browser_press" => {
            page.press(arg(args, "key")?).await?;
            Ok(Done::text("pressed"))
        }
        "browser_vision" | "browser_screenshot" => {
            let png = page.screenshot().await?;
            let s = page.snapshot().await?;
            Ok(Done {
                text: format!(
                    "screenshot of {} ({})",
                    printable(&s.url, 500),
                    printable(&s.title, 200)
                ),
                png: Some(png),
            })
        }
        _ => tabs(&ctx, args).await,
    }
}

/// After a navigation begun at `since` (Unix ms): where the page is now, or why it is not
/// there: the proxy's refusal of the address the page loads from (the host and port of the
/// page, or of `asked` when nothing loaded), named when it refused.
async fn opened(
    ctx: &Context,
    since: i64,
    asked: &str,
    outcome: Result<(), BrowserError>,
) -> Result<Done, BrowserError> {
    let here = match &outcome {
        Ok(()) => Some(ctx.browser.snapshot().await?),
        Err(_) => None,
    };
    let origin = |u: &str| {
        let u = url::Url::parse(u).ok()?;
        let host = u.host_str()?.trim_matches(['[', ']']).to_string();
        Some((host, u.port_or_known_default()?))
    };
    let loaded_from = here
        .as_ref()
        .and_then(|s| origin(&s.url))
        .or_else(|| origin(asked));
    let refusal = ctx.network.decisions().into_iter().rev().find(|d| {
        d.at_ms >= since
            && !d.allowed
            && d.verdict != "paused"
            && loaded_from
                .as_ref()
                .is_some_and(|(h, p)| *h == d.host && *p == d.port)
    });
    if let Some(d) = &refusal {
        return Err(refused(d));
    }
    outcome?;
    let s = here.ok_or(BrowserError::Gone)?;
    Ok(Done::text(format!(
        "opened {} ({})",
        printable(&s.url, 500),
        printable(&s.title, 200)
    )))
}

fn refused(d: &crate::egress::Decision) -> BrowserError {
    page_error(format!(
        "yy's egress proxy refused {}:{} ({}): {}; the browser reaches only public addresses on ports 80 and 443",
        printable(&d.host, 200),
        d.port,
        d.verdict,
        printable(&d.reason, 200)
    ))
}

/// A snapshot as the model reads it.
fn snapshot_text(s: &Snapshot) -> String {
    let mut out = format!("URL: {}\nTitle: {}\n\n{}\n", s.url, s.title, s.text);
    if !s.elements.is_empty() {
        out.push_str("\nElements:\n");
        for e in &s.elements {
            out.push_str(&format!("{} {} {:?}\n", e.ref_id, e.kind, e.name));
        }
    }
    if !s.links.is_empty() {
        out.push_str("\nLinks:\n");
        for l in &s.links {
            out.push_str(&format!("{:?} -> {}\n", l.text, l.href));
        }
    }
    out
}

async fn tabs(ctx: &Context, args: &Value) -> Result<Done, BrowserError> {
    let page = &ctx.browser;
    let index = || {
        args["index"]
            .as_u64()
            .map(|i| i as usize)
            .ok_or_else(|| page_error("the argument \"index\" (a number from 0) is missing"))
    };
    match arg(args, "action")? {
        "list" => {}
        "new" => {
            // Without a URL the tab opens empty.
            let url = match args["url"].as_str() {
                Some(u) => web_url(u)?,
                None => "about:blank".to_string(),
            };
            let since = crate::timefmt::now_ms();
            let outcome = page.new_tab(&url).await;
            if outcome.is_err() || url != "about:blank" {
                opened(ctx, since, &url, outcome).await?;
            }
        }
        "select" => page.select_tab(index()?).await?,
        "close" => page.close_tab(index()?).await?,
        other => {
            return Err(page_error(format!(
                "action {:?}: give list, new, select or close",
                printable(other, 20)
            )));
        }
    }
    let listed = page.tabs().await?;
    let lines: Vec<String> = listed
        .iter()
        .map(|t| {
            format!(
                "{}{} {} ({})",
                if t.current { "*" } else { " " },
                t.index,
                t.url,
                t.title
            )
        })
        .collect();
    Ok(Done::text(lines.join("\n")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_web_urls_open_and_a_bare_host_is_https() {
        assert_eq!(web_url("http://a.example/x").unwrap(), "http://a.example/x");
        assert_eq!(
            web_url("example.org/report").unwrap(),
            "https://example.org/report"
        );
        for bad in [
            "file:///etc/passwd",
            "javascript:alert(1)",
            "data:text/html,x",
            "chrome://settings",
            "not a url",
        ] {
            assert!(web_url(bad).is_err(), "{bad}");
        }
    }
}
