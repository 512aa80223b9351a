//! The model settings of an allowlisted Hermes profile, read on the Runner's own host from
//! its Hermes home: `config.yaml` (the default profile) or `profiles/<name>/config.yaml`,
//! and the `.env` beside them. They go to the Worker over its private pipe only.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::hermes::Secret;

/// The API modes the Worker's model loop speaks.
pub const API_MODES: [&str; 3] = ["chat_completions", "anthropic_messages", "codex_responses"];

#[derive(Clone)]
pub struct ModelSettings {
    pub provider: Option<String>,
    pub model: String,
    pub base_url: Option<String>,
    pub api_mode: Option<String>,
    /// `model.supports_vision` (Hermes's own key): whether screenshots reach the model as
    /// images; unset, Hermes decides from its model catalogue.
    pub supports_vision: Option<bool>,
    /// `model.context_length` (Hermes's own key): the model's context window, which Hermes
    /// otherwise finds by probing the model's server. Unset in the profile, it may be what
    /// an earlier Worker found ([`ContextWindows`]).
    pub context_length: Option<u64>,
    /// `model.max_tokens` (Hermes's own key): the most tokens one answer may have.
    pub max_tokens: Option<u64>,
    /// `agent.max_turns` (Hermes's own key): the most model calls of one turn.
    pub max_turns: Option<u64>,
    pub api_key: Secret,
    /// The file the settings came from, for logs and errors.
    pub source: PathBuf,
}

impl std::fmt::Debug for ModelSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSettings")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_mode", &self.api_mode)
            .field("context_length", &self.context_length)
            .field("max_tokens", &self.max_tokens)
            .field("max_turns", &self.max_turns)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl ModelSettings {
    /// What the Worker needs, key included: sent over its stdin only.
    pub fn to_wire(&self) -> serde_json::Value {
        serde_json::json!({
            "provider": self.provider,
            "model": self.model,
            "base_url": self.base_url,
            "api_mode": self.api_mode,
            "supports_vision": self.supports_vision,
            "context_length": self.context_length,
            "max_tokens": self.max_tokens,
            "max_turns": self.max_turns,
            "api_key": self.api_key.expose(),
        })
    }
}

/// The directory of a profile in a Hermes home (the default profile is the home itself).
pub fn profile_dir(hermes_home: &Path, profile: &str) -> PathBuf {
    if profile == "default" {
        hermes_home.to_path_buf()
    } else {
        hermes_home.join("profiles").join(profile)
    }
}

/// Reads the profile's model settings. Every error names the file and the key to fix.
pub fn resolve(hermes_home: &Path, profile: &str) -> Result<ModelSettings, String> {
    if profile.is_empty() || profile.contains('/') || profile.starts_with('.') {
        return Err(format!("profile name {profile:?} is not a Hermes profile"));
    }
    let dir = profile_dir(hermes_home, profile);
    let config = dir.join("config.yaml");
    let text = std::fs::read_to_string(&config).map_err(|e| {
        format!(
            "profile {profile:?} has no model configuration: cannot read {} ({e}); write its `model:` section (see docs/hermes.md)",
            config.display()
        )
    })?;
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text)
        .map_err(|e| format!("{} is not valid YAML: {e}", config.display()))?;
    let model = doc.get("model");
    let field = |key: &str| -> Option<String> {
        model
            .and_then(|m| m.get(key))
            .and_then(|v| v.as_str())
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    // `model: NAME` is the short form of `model: {default: NAME}`.
    let name = match model {
        Some(serde_yaml_ng::Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        _ => field("default").ok_or_else(|| {
            format!(
                "{} sets no model: add `model.default: <model name>`",
                config.display()
            )
        })?,
    };
    let api_mode = field("api_mode");
    if let Some(mode) = &api_mode
        && !API_MODES.contains(&mode.as_str())
    {
        return Err(format!(
            "{}: model.api_mode {mode:?} is not one of {}",
            config.display(),
            API_MODES.join(", ")
        ));
    }
    let base_url = field("base_url");
    if let Some(url) = &base_url
        && url::Url::parse(url).is_err()
    {
        return Err(format!(
            "{}: model.base_url {url:?} is not a URL",
            config.display()
        ));
    }
    let provider = field("provider");
    let api_key = match field("api_key") {
        Some(key) => key,
        None => {
            let env_file = dir.join(".env");
            let var = key_variable(provider.as_deref());
            read_env(&env_file)
                .remove(&var)
                .filter(|k| !k.is_empty())
                .ok_or_else(|| {
                    format!(
                        "profile {profile:?} has no API key: set model.api_key in {} or {var} in {}",
                        config.display(),
                        env_file.display()
                    )
                })?
        }
    };
    let supports_vision = model
        .and_then(|m| m.get("supports_vision"))
        .and_then(|v| v.as_bool());
    let count =
        |section: &str, key: &str, what: &str| match doc.get(section).and_then(|m| m.get(key)) {
            None => Ok(None),
            Some(v) => v.as_u64().filter(|n| *n > 0).map(Some).ok_or_else(|| {
                format!(
                    "{}: {section}.{key} must be a positive number of {what}",
                    config.display()
                )
            }),
        };
    let context_length = count("model", "context_length", "tokens")?;
    let max_tokens = count("model", "max_tokens", "tokens")?;
    let max_turns = count("agent", "max_turns", "model calls")?;
    Ok(ModelSettings {
        provider,
        model: name,
        base_url,
        api_mode,
        supports_vision,
        context_length,
        max_tokens,
        max_turns,
        api_key: Secret::new(api_key),
        source: config,
    })
}

/// How long a context window a Worker found is used for later Workers.
const WINDOW_KEPT: Duration = Duration::from_secs(3600);
/// Models (and servers) remembered at most; the oldest is forgotten first.
const WINDOWS_MAX: usize = 64;

/// Context windows that Workers found by probing the model's server, by model and server.
/// Hermes probes once per process (several requests to the server, more for one on the
/// local network); a Worker is a new process for each agent, so without this every
/// agent's first turn waited for the probe. A long-lived `hermes serve` keeps what it
/// found the same way.
#[derive(Default)]
pub struct ContextWindows {
    found: Mutex<HashMap<(String, String), (u64, Instant)>>,
}

impl ContextWindows {
    fn key(s: &ModelSettings) -> (String, String) {
        (s.model.clone(), s.base_url.clone().unwrap_or_default())
    }

    /// Fills in the window an earlier Worker found, unless the profile sets one.
    pub fn fill(&self, settings: &mut ModelSettings) {
        if settings.context_length.is_some() {
            return;
        }
        let found = self.found.lock().unwrap_or_else(|p| p.into_inner());
        settings.context_length = found
            .get(&Self::key(settings))
            .filter(|(_, at)| at.elapsed() < WINDOW_KEPT)
            .map(|(n, _)| *n);
    }

    /// Keeps what a Worker found for settings that named no window (neither the profile
    /// nor an earlier find: a window is probed again once it is an hour old).
    pub fn learn(&self, settings: &ModelSettings, window: u64) {
        if settings.context_length.is_some() || window == 0 {
            return;
        }
        let mut found = self.found.lock().unwrap_or_else(|p| p.into_inner());
        if found.len() >= WINDOWS_MAX
            && let Some(oldest) = found
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone())
        {
            found.remove(&oldest);
        }
        found.insert(Self::key(settings), (window, Instant::now()));
    }
}

/// The `.env` variable that holds a provider's key.
fn key_variable(provider: Option<&str>) -> String {
    match provider.unwrap_or("custom") {
        "custom" | "openai" => "OPENAI_API_KEY".into(),
        other => format!(
            "{}_API_KEY",
            other
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                })
                .collect::<String>()
        ),
    }
}

/// `KEY=VALUE` lines; comments, blank lines and `export ` prefixes are allowed, and values
/// may be quoted. A missing file is empty.
fn read_env(path: &Path) -> HashMap<String, String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return HashMap::new();
    };
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("export ").unwrap_or(line);
            if line.is_empty() || line.starts_with('#') {
                return None;
            }
            let (k, v) = line.split_once('=')?;
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(v);
            Some((k.trim().to_string(), v.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home(config: &str, env: Option<&str>) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("profiles/coder");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("config.yaml"), config).unwrap();
        if let Some(env) = env {
            std::fs::write(p.join(".env"), env).unwrap();
        }
        d
    }

    #[test]
    fn settings_come_from_the_profile_and_its_env() {
        let d = home(
            "model:\n  default: m1\n  provider: openrouter\n  base_url: http://127.0.0.1:9/v1\n  api_mode: chat_completions\n",
            Some("# keys\nexport OPENROUTER_API_KEY=\"sk-or-1\"\n"),
        );
        let s = resolve(d.path(), "coder").unwrap();
        assert_eq!(s.model, "m1");
        assert_eq!(s.provider.as_deref(), Some("openrouter"));
        assert_eq!(s.api_key.expose(), "sk-or-1");
        assert!(!format!("{s:?}").contains("sk-or-1"), "Debug hides the key");
        let short = home("model: m2\n", Some("OPENAI_API_KEY=k\n"));
        assert_eq!(resolve(short.path(), "coder").unwrap().model, "m2");
        assert_eq!(s.context_length, None);
        let window = home(
            "model:\n  default: m\n  api_key: k\n  context_length: 32768\n",
            None,
        );
        let s = resolve(window.path(), "coder").unwrap();
        assert_eq!(s.context_length, Some(32768));
        assert_eq!(s.to_wire()["context_length"], 32768);
        assert_eq!(s.to_wire()["max_tokens"], serde_json::Value::Null);
        let capped = home(
            "model:\n  default: m\n  api_key: k\n  max_tokens: 512\nagent:\n  max_turns: 7\n",
            None,
        );
        let wire = resolve(capped.path(), "coder").unwrap().to_wire();
        assert_eq!(wire["max_tokens"], 512);
        assert_eq!(wire["max_turns"], 7);
    }

    #[test]
    fn a_window_a_worker_found_fills_settings_that_name_none() {
        let windows = ContextWindows::default();
        // The settings of a profile whose model section has `model_lines`, filled in.
        let filled = |model_lines: &str| {
            let d = home(&format!("model:\n  api_key: k\n{model_lines}"), None);
            let mut s = resolve(d.path(), "coder").unwrap();
            windows.fill(&mut s);
            s
        };
        let here = "  default: m\n  base_url: http://127.0.0.1:9/v1\n";
        let first = filled(here);
        assert_eq!(first.context_length, None, "nothing found yet");
        windows.learn(&first, 200_000);
        assert_eq!(filled(here).context_length, Some(200_000));
        // What the profile says wins, and is never overwritten by a probe's result.
        let own = filled(&format!("{here}  context_length: 8192\n"));
        assert_eq!(own.context_length, Some(8192));
        // Another model on the same server, or the same model elsewhere, is probed again.
        let m2 = "  default: m2\n  base_url: http://127.0.0.1:9/v1\n";
        assert_eq!(filled(m2).context_length, None);
        let elsewhere = "  default: m\n  base_url: http://127.0.0.1:10/v1\n";
        assert_eq!(filled(elsewhere).context_length, None);
        for i in 0..(WINDOWS_MAX + 10) {
            let mut s = first.clone();
            s.model = format!("model-{i}");
            windows.learn(&s, 1000);
        }
        assert_eq!(windows.found.lock().unwrap().len(), WINDOWS_MAX, "bounded");
    }

    #[test]
    fn missing_or_invalid_settings_name_the_file_and_the_key() {
        let d = tempfile::tempdir().unwrap();
        let e = resolve(d.path(), "coder").unwrap_err();
        assert!(e.contains("profiles/coder/config.yaml"), "{e}");
        let e = resolve(home("model:\n  provider: x\n", None).path(), "coder").unwrap_err();
        assert!(e.contains("model.default"), "{e}");
        let e = resolve(home("model: m\n", None).path(), "coder").unwrap_err();
        assert!(e.contains("OPENAI_API_KEY") && e.contains(".env"), "{e}");
        let e = resolve(
            home(
                "model:\n  default: m\n  api_mode: telepathy\n  api_key: k\n",
                None,
            )
            .path(),
            "coder",
        )
        .unwrap_err();
        assert!(e.contains("model.api_mode"), "{e}");
        for key in ["context_length", "max_tokens"] {
            for bad in ["0", "-5", "lots"] {
                let cfg = format!("model:\n  default: m\n  api_key: k\n  {key}: {bad}\n");
                let e = resolve(home(&cfg, None).path(), "coder").unwrap_err();
                assert!(e.contains(&format!("model.{key}")), "{e}");
            }
        }
        let cfg = "model:\n  default: m\n  api_key: k\nagent:\n  max_turns: 0\n";
        let e = resolve(home(cfg, None).path(), "coder").unwrap_err();
        assert!(e.contains("agent.max_turns"), "{e}");
        assert!(resolve(d.path(), "../etc").is_err());
        for mode in API_MODES {
            let cfg = format!("model:\n  default: m\n  api_mode: {mode}\n  api_key: k\n");
            assert_eq!(
                resolve(home(&cfg, None).path(), "coder")
                    .unwrap()
                    .api_mode
                    .as_deref(),
                Some(mode)
            );
        }
    }
}
