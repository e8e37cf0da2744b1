//! `--config FILE`: flag defaults from TOML. Each command reads the table named after it (`[serve]`,
//! `[perf-client]`, ...); its keys are flag names. Values from the file go before the command line's own flags, so
//! a flag given on the command line wins.

use std::ffi::OsString;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// Commands whose name is two words on the command line.
const NESTED: [&str; 1] = ["perf"];

/// Returns `args` with the config file's flags for the chosen command inserted after the command's name.
pub fn expand_args(args: Vec<OsString>) -> Result<Vec<OsString>> {
    let Some(config_at) = args.iter().position(|a| a == "--config") else { return Ok(args) };
    let Some(path) = args.get(config_at + 1) else { bail!("--config needs a file") };
    let text = std::fs::read_to_string(Path::new(path))
        .with_context(|| format!("cannot read config {}", path.to_string_lossy()))?;
    let table: toml::Table = toml::from_str(&text).with_context(|| format!("config {}", path.to_string_lossy()))?;
    // The command is the first argument that is not the program, --config, its value or another global flag.
    let mut command_at = None;
    let mut i = 1;
    while i < args.len() {
        let arg = args[i].to_string_lossy();
        if arg == "--config" || arg == "--log-level" {
            i += 2;
            continue;
        }
        command_at = Some(i);
        break;
    }
    let Some(mut at) = command_at else { return Ok(args) };
    let mut name = args[at].to_string_lossy().into_owned();
    if NESTED.contains(&name.as_str()) {
        if let Some(sub) = args.get(at + 1) {
            name = format!("{name}-{}", sub.to_string_lossy());
            at += 1;
        }
    }
    let Some(section) = table.get(&name) else { return Ok(args) };
    let Some(section) = section.as_table() else {
        bail!("config {}: [{name}] must be a table", path.to_string_lossy())
    };
    let mut injected = Vec::new();
    for (key, value) in section {
        let flag = format!("--{key}");
        let values: Vec<&toml::Value> = match value {
            toml::Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        for value in values {
            match value {
                toml::Value::Boolean(true) => injected.push(OsString::from(&flag)),
                toml::Value::Boolean(false) => {}
                toml::Value::String(s) => injected.extend([OsString::from(&flag), OsString::from(s)]),
                toml::Value::Integer(n) => injected.extend([OsString::from(&flag), OsString::from(n.to_string())]),
                toml::Value::Float(x) => injected.extend([OsString::from(&flag), OsString::from(x.to_string())]),
                other => bail!("config {}: [{name}] {key}: unsupported value {other}", path.to_string_lossy()),
            }
        }
    }
    let mut out = args[..=at].to_vec();
    out.extend(injected);
    out.extend_from_slice(&args[at + 1..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn config_flags_go_before_the_command_line_flags() {
        let path = std::env::temp_dir().join(format!("tng-config-{}.toml", std::process::id()));
        std::fs::write(&path, "[perf-client]\nduration = 3\njson = true\nlocal = [\"10.0.0.1:0\", \"10.0.1.1:0\"]\n")
            .unwrap();
        let p = path.to_str().unwrap();
        let out = expand_args(os(&["tng", "--config", p, "perf", "client", "--duration", "5"])).unwrap();
        let out: Vec<String> = out.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(
            out,
            [
                "tng",
                "--config",
                p,
                "perf",
                "client",
                "--duration",
                "3",
                "--json",
                "--local",
                "10.0.0.1:0",
                "--local",
                "10.0.1.1:0",
                "--duration",
                "5"
            ]
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn missing_config_file_is_an_error_naming_it() {
        let err = expand_args(os(&["tng", "--config", "/nonexistent/tng.toml", "serve"])).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/tng.toml"));
    }
}
