//! Validation shared by the server (the authority) and the CLI (to fail before a round trip).

pub const NAME_MAX: usize = 64;

/// Names of accounts, sources, profiles and agents: 1-64 ASCII letters, digits, `.`, `_`
/// or `-`, starting with a letter or digit (they appear in tables, URLs and file names).
pub fn check_name(kind: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid {kind} name {name:?}: use 1-{NAME_MAX} letters, digits, '.', '_' or '-', starting with a letter or digit"
        ))
    }
}

/// An absolute, normalized path: starts with `/`, no `.`/`..` parts, no empty parts.
pub fn check_absolute_path(what: &str, path: &str) -> Result<(), String> {
    // Checked on the text: Path::components would silently drop "." and "//".
    let normalized = path == "/"
        || path.strip_prefix('/').is_some_and(|rest| {
            rest.split('/')
                .all(|part| !part.is_empty() && part != "." && part != "..")
        });
    if normalized && !path.contains('\0') && path.len() <= 4096 {
        Ok(())
    } else {
        Err(format!(
            "{what} {path:?} must be an absolute, normalized path such as /workspace"
        ))
    }
}

/// An `http://` or `https://` base URL.
/// What a yy server's URL looks like (`yy serve` listens on 8420).
pub const SERVER_URL_EXAMPLE: &str = "http://127.0.0.1:8420";
/// What a Hermes server's URL looks like (Hermes listens on 9119).
pub const HERMES_URL_EXAMPLE: &str = "http://127.0.0.1:9119";

/// `url` is http(s) with a host; the error shows `example` (one of the `*_URL_EXAMPLE`s).
pub fn check_http_url(what: &str, url: &str, example: &str) -> Result<(), String> {
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
        _ => Err(format!(
            "{what} {url:?} is not an http:// or https:// URL such as {example}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name("agent", "a").is_ok());
        assert!(check_name("agent", "Bot-1.2_x").is_ok());
        assert!(check_name("agent", "").is_err());
        assert!(check_name("agent", "-x").is_err());
        assert!(check_name("agent", "a b").is_err());
        assert!(check_name("agent", "a/b").is_err());
        assert!(check_name("agent", &"a".repeat(65)).is_err());
        assert!(check_name("agent", "é").is_err());
    }

    #[test]
    fn absolute_paths() {
        assert!(check_absolute_path("cwd", "/workspace").is_ok());
        assert!(check_absolute_path("cwd", "/home/yy/work").is_ok());
        for bad in [
            ".", "auto", "cwd", "work", "/a/../b", "/a/./b", "//a", "/a/", "",
        ] {
            assert!(check_absolute_path("cwd", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn urls() {
        let ex = SERVER_URL_EXAMPLE;
        assert!(check_http_url("u", "http://127.0.0.1:9119", ex).is_ok());
        assert!(check_http_url("u", "https://yy.example", ex).is_ok());
        assert!(check_http_url("u", "ftp://x", ex).is_err());
        let e = check_http_url("server URL", "127.0.0.1:80", ex).unwrap_err();
        assert!(e.ends_with("such as http://127.0.0.1:8420"), "{e}");
        let e = check_http_url("--hermes-url", "x", HERMES_URL_EXAMPLE).unwrap_err();
        assert!(e.ends_with("such as http://127.0.0.1:9119"), "{e}");
    }
}
