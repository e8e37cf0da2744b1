//! Turning a scenario file plus `--set` overrides into a [`Scenario`].
//!
//! Overrides edit the parsed TOML document before deserialization, so any value can be overridden, and the schema
//! (unknown keys, types) is checked once, on the final document. Errors name the file and the dotted key.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::scenario::Scenario;

/// One `--set dotted.key=value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    pub key: Vec<String>,
    pub value: toml::Value,
}

/// Why a scenario could not be loaded.
#[derive(Debug)]
pub enum DocumentError {
    Read { file: PathBuf, error: std::io::Error },
    Syntax { file: PathBuf, message: String },
    BadOverride { text: String, problem: String },
    Schema { file: PathBuf, key: String, message: String },
}

impl fmt::Display for DocumentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DocumentError::Read { file, error } => write!(f, "{}: {error}", file.display()),
            DocumentError::Syntax { file, message } => write!(f, "{}: {message}", file.display()),
            DocumentError::BadOverride { text, problem } => write!(f, "--set {text}: {problem}"),
            DocumentError::Schema { file, key, message } if key.is_empty() => {
                write!(f, "{}: {message}", file.display())
            }
            DocumentError::Schema { file, key, message } => {
                write!(f, "{}: {key}: {message}", file.display())
            }
        }
    }
}

impl std::error::Error for DocumentError {}

impl Override {
    /// Parses `dotted.key=value`; the value is read as a TOML value (`15`, `true`, `"x"`, `[1, 2]`), and a bare
    /// word that is not valid TOML is taken as a string (`mode=connection-per-flow`).
    pub fn parse(text: &str) -> Result<Override, DocumentError> {
        let bad = |problem: &str| DocumentError::BadOverride { text: text.to_owned(), problem: problem.to_owned() };
        let (key, raw_value) = text.split_once('=').ok_or_else(|| bad("expected dotted.key=value"))?;
        let key: Vec<String> = key.trim().split('.').map(str::to_owned).collect();
        if key.iter().any(String::is_empty) {
            return Err(bad("the key has an empty segment"));
        }
        let raw_value = raw_value.trim();
        let value = match format!("value = {raw_value}").parse::<toml::Table>() {
            Ok(mut table) => table.remove("value").ok_or_else(|| bad("no value"))?,
            Err(_) => toml::Value::String(raw_value.to_owned()),
        };
        Ok(Override { key, value })
    }

    /// Writes the value into the document; numeric segments index arrays, missing tables are created.
    pub fn apply(&self, document: &mut toml::Table) -> Result<(), DocumentError> {
        let dotted = self.key.join(".");
        let bad = |problem: String| DocumentError::BadOverride { text: dotted.clone(), problem };
        let Some((last, parents)) = self.key.split_last() else {
            return Err(bad("empty key".to_owned()));
        };
        let mut slot = SlotRef::Table(document);
        for (depth, segment) in parents.iter().enumerate() {
            let walked = self.key[..=depth].join(".");
            slot = match slot {
                SlotRef::Table(table) => {
                    let next = table.entry(segment.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
                    SlotRef::from_value(next).ok_or_else(|| bad(format!("{walked} is not a table or an array")))?
                }
                SlotRef::Array(array) => {
                    let index =
                        array_index(segment, array.len()).map_err(|problem| bad(format!("{walked}: {problem}")))?;
                    SlotRef::from_value(&mut array[index])
                        .ok_or_else(|| bad(format!("{walked} is not a table or an array")))?
                }
            };
        }
        match slot {
            SlotRef::Table(table) => {
                table.insert(last.clone(), self.value.clone());
            }
            SlotRef::Array(array) => {
                let index = array_index(last, array.len()).map_err(|problem| bad(format!("{dotted}: {problem}")))?;
                array[index] = self.value.clone();
            }
        }
        Ok(())
    }
}

enum SlotRef<'a> {
    Table(&'a mut toml::Table),
    Array(&'a mut Vec<toml::Value>),
}

impl<'a> SlotRef<'a> {
    fn from_value(value: &'a mut toml::Value) -> Option<SlotRef<'a>> {
        match value {
            toml::Value::Table(table) => Some(SlotRef::Table(table)),
            toml::Value::Array(array) => Some(SlotRef::Array(array)),
            _ => None,
        }
    }
}

fn array_index(segment: &str, len: usize) -> Result<usize, String> {
    let index: usize = segment.parse().map_err(|_| format!("{segment:?} is not an array index"))?;
    if index >= len {
        return Err(format!("index {index} is out of range (the array has {len} entries)"));
    }
    Ok(index)
}

/// Parses scenario text, applies the overrides in order and deserializes the result.
pub fn parse_scenario(file: &Path, text: &str, overrides: &[Override]) -> Result<Scenario, DocumentError> {
    let mut document: toml::Table = text.parse().map_err(|error: toml::de::Error| DocumentError::Syntax {
        file: file.to_owned(),
        message: error.to_string(),
    })?;
    for override_ in overrides {
        override_.apply(&mut document)?;
    }
    serde_path_to_error::deserialize(toml::Value::Table(document)).map_err(|error| {
        let key = error.path().to_string();
        DocumentError::Schema {
            file: file.to_owned(),
            key: if key == "." { String::new() } else { key },
            message: error.into_inner().message().to_owned(),
        }
    })
}

/// Reads and parses a scenario file.
pub fn load_scenario(file: &Path, overrides: &[Override]) -> Result<Scenario, DocumentError> {
    let text = std::fs::read_to_string(file).map_err(|error| DocumentError::Read { file: file.to_owned(), error })?;
    parse_scenario(file, &text, overrides)
}
