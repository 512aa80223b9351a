//! The plugin that hands Hermes's browser tools to the managed browser: written into the
//! supervised Hermes's home (`plugins/yy_browser/`) and enabled in its `config.yaml`
//! (Hermes loads a plugin only when `plugins.enabled` names it, and lets it replace its own
//! browser tools only with `allow_tool_override`).

use std::path::Path;

use serde_yaml_ng::{Mapping, Value};

const NAME: &str = "yy_browser";
const PLUGIN: &str = include_str!("plugin.py");
const MANIFEST: &str = "name: yy_browser\nversion: \"1\"\ndescription: Hermes's browser tools on the yy Runner's managed browser\n";
/// What the Runner appends to a config.yaml that has no `plugins` section (its comments
/// and layout stay as they are).
const APPENDED: &str = "\n# Added by the yy Runner: its managed browser serves Hermes's browser tools\n# (yy docs/browser.md).\nplugins:\n  enabled:\n  - yy_browser\n  entries:\n    yy_browser:\n      allow_tool_override: true\n";

/// Writes the plugin under `hermes_home` and enables it in `config.yaml`.
pub fn install(hermes_home: &Path) -> Result<(), String> {
    let dir = hermes_home.join("plugins").join(NAME);
    let fail = |what: &str, e: std::io::Error| format!("cannot write {what}: {e}");
    crate::fsutil::create_private_dir(&dir).map_err(|e| fail(&dir.display().to_string(), e))?;
    for (file, text) in [("plugin.yaml", MANIFEST), ("__init__.py", PLUGIN)] {
        let path = dir.join(file);
        crate::fsutil::write_atomic(&path, text.as_bytes(), 0o600)
            .map_err(|e| fail(&path.display().to_string(), e))?;
    }
    let config = hermes_home.join("config.yaml");
    let text = match std::fs::read_to_string(&config) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("cannot read {}: {e}", config.display())),
    };
    let Some(new) = enabled_in(&text).map_err(|e| format!("{}: {e}", config.display()))? else {
        return Ok(());
    };
    crate::fsutil::write_atomic(&config, new.as_bytes(), 0o600)
        .map_err(|e| fail(&config.display().to_string(), e))?;
    tracing::info!(config = %config.display(), "enabled Hermes plugin yy_browser (the managed browser's tools)");
    Ok(())
}

/// `config.yaml`'s text with the plugin enabled, or `None` when it already is.
fn enabled_in(text: &str) -> Result<Option<String>, String> {
    let mut doc: Value = if text.trim().is_empty() {
        Value::Mapping(Mapping::new())
    } else {
        serde_yaml_ng::from_str(text).map_err(|e| format!("not valid YAML: {e}"))?
    };
    let Value::Mapping(root) = &mut doc else {
        return Err("not a YAML mapping".into());
    };
    let Some(plugins) = root.get_mut("plugins") else {
        return Ok(Some(format!("{text}{APPENDED}")));
    };
    if !plugins.is_mapping() {
        *plugins = Value::Mapping(Mapping::new());
    }
    let Value::Mapping(plugins) = plugins else {
        unreachable!()
    };
    let mut changed = false;
    let enabled = plugins
        .entry("enabled".into())
        .or_insert_with(|| Value::Sequence(Vec::new()));
    if !enabled.is_sequence() {
        *enabled = Value::Sequence(Vec::new());
    }
    if let Value::Sequence(list) = enabled
        && !list.iter().any(|v| v.as_str() == Some(NAME))
    {
        list.push(NAME.into());
        changed = true;
    }
    let entries = plugins
        .entry("entries".into())
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    if !entries.is_mapping() {
        *entries = Value::Mapping(Mapping::new());
    }
    if let Value::Mapping(entries) = entries {
        let entry = entries
            .entry(NAME.into())
            .or_insert_with(|| Value::Mapping(Mapping::new()));
        if !entry.is_mapping() {
            *entry = Value::Mapping(Mapping::new());
        }
        if let Value::Mapping(entry) = entry
            && entry.get("allow_tool_override").and_then(Value::as_bool) != Some(true)
        {
            entry.insert("allow_tool_override".into(), true.into());
            changed = true;
        }
    }
    if !changed {
        return Ok(None);
    }
    serde_yaml_ng::to_string(&doc)
        .map(Some)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enabled(text: &str) -> Value {
        let new = enabled_in(text).unwrap().unwrap_or_else(|| text.into());
        serde_yaml_ng::from_str(&new).unwrap()
    }

    fn is_enabled(doc: &Value) -> bool {
        doc["plugins"]["enabled"]
            .as_sequence()
            .is_some_and(|l| l.iter().any(|v| v.as_str() == Some(NAME)))
            && doc["plugins"]["entries"][NAME]["allow_tool_override"] == Value::Bool(true)
    }

    #[test]
    fn a_config_without_plugins_keeps_its_text_and_gets_the_section_appended() {
        let text = "# my model\nmodel:\n  default: m # inline\n";
        let new = enabled_in(text).unwrap().unwrap();
        assert!(new.starts_with(text), "{new}");
        assert!(is_enabled(&serde_yaml_ng::from_str(&new).unwrap()));
        assert!(is_enabled(&enabled("")));
    }

    #[test]
    fn other_plugins_and_settings_stay_and_a_second_run_changes_nothing() {
        let text = "model:\n  default: m\nplugins:\n  enabled: [disk-cleanup]\n  entries:\n    other: {x: 1}\n";
        let doc = enabled(text);
        assert!(is_enabled(&doc));
        assert_eq!(doc["model"]["default"].as_str(), Some("m"));
        assert_eq!(doc["plugins"]["enabled"][0].as_str(), Some("disk-cleanup"));
        assert_eq!(doc["plugins"]["entries"]["other"]["x"].as_i64(), Some(1));
        let again = serde_yaml_ng::to_string(&doc).unwrap();
        assert_eq!(enabled_in(&again).unwrap(), None);
    }

    #[test]
    fn a_config_that_is_not_a_mapping_is_refused() {
        assert!(enabled_in("- a\n- b\n").is_err());
        assert!(enabled_in("model: [").is_err());
    }
}
