//! The shared wire vectors (`testdata/wire/*.json`), one test per vector, plus an inventory check so that a
//! missing or emptied directory fails instead of passing vacuously.

use std::path::{Path, PathBuf};

use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::{Map, Value};
use tng_wire::{Packet, Payload, VERSION};

const MIN_VECTORS: usize = 20;
const MIN_INVALID_VECTORS: usize = 6;

fn vector_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../testdata/wire")
}

fn vector_paths() -> Result<Vec<PathBuf>, String> {
    let dir = vector_dir();
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?.path();
        if path.extension().is_some_and(|ext| ext == "json") {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

fn load(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))
}

fn from_hex(hex: &str) -> Result<Vec<u8>, String> {
    if !hex.len().is_multiple_of(2) {
        return Err(format!("odd-length hex string {hex:?}"));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            let pair = hex.get(i..i + 2).ok_or_else(|| format!("non-ASCII hex string {hex:?}"))?;
            u8::from_str_radix(pair, 16).map_err(|e| format!("bad hex {pair:?}: {e}"))
        })
        .collect()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The parsed packet in the vectors' field vocabulary (wire-format section 9).
fn fields_of(packet: &Packet<'_>) -> Map<String, Value> {
    let header = packet.header();
    let mut fields: Vec<(&str, Value)> = vec![
        ("version", VERSION.into()),
        ("packet_type", u8::from(header.packet_type).into()),
        ("flags", header.flags.bits().into()),
        ("channel_id", header.channel_id.into()),
        ("connection_id", header.connection_id.into()),
        ("packet_number", header.packet_number.into()),
        ("payload_length", header.payload_length.into()),
        ("queue_level", header.feedback.queue_level.into()),
        ("rate_hint", header.feedback.rate_hint.into()),
    ];
    match packet.payload {
        Payload::Initial(handshake) => fields.extend([
            ("stage", u8::from(handshake.stage).into()),
            ("token", to_hex(handshake.token).into()),
            ("noise", to_hex(handshake.noise).into()),
            ("padding_len", handshake.padding_len().into()),
        ]),
        Payload::Retry { token } => fields.push(("token", to_hex(token).into())),
        Payload::Data(sealed) | Payload::Ack(sealed) | Payload::Probe(sealed) | Payload::Close(sealed) => {
            fields.push(("sealed", to_hex(sealed).into()))
        }
    }
    fields.into_iter().map(|(name, value)| (name.to_owned(), value)).collect()
}

fn check_vector(path: &Path) -> Result<(), Failed> {
    let vector = load(path)?;
    let bytes = from_hex(vector["hex"].as_str().ok_or("vector has no \"hex\" string")?)?;
    let parsed = Packet::parse(&bytes);
    match vector["valid"].as_bool() {
        Some(true) => {
            let packet = parsed.map_err(|e| format!("valid vector rejected: {} ({e})", e.as_str()))?;
            let expected = vector["fields"].as_object().ok_or("valid vector has no \"fields\" object")?;
            let actual = fields_of(&packet);
            for (name, value) in expected {
                let got = actual.get(name).ok_or_else(|| format!("vector field {name:?} unknown to the codec"))?;
                if got != value {
                    return Err(format!("field {name}: parsed {got}, vector says {value}").into());
                }
            }
            if let Some(unchecked) = actual.keys().find(|name| !expected.contains_key(*name)) {
                return Err(format!("vector lacks field {unchecked:?}").into());
            }
            let mut encoded = Vec::new();
            packet.encode(&mut encoded).map_err(|e| format!("re-encoding failed: {e}"))?;
            if encoded != bytes {
                return Err(
                    format!("re-encoding differs:\n  got  {}\n  want {}", to_hex(&encoded), to_hex(&bytes)).into()
                );
            }
            Ok(())
        }
        Some(false) => {
            let expected = vector["error"].as_str().ok_or("invalid vector has no \"error\" string")?;
            match parsed {
                Ok(packet) => Err(format!("accepted, expected {expected}: {packet:?}").into()),
                Err(e) if e.as_str() == expected => Ok(()),
                Err(e) => Err(format!("rejected as {} ({e}), expected {expected}", e.as_str()).into()),
            }
        }
        None => Err("vector has no boolean \"valid\"".into()),
    }
}

fn check_inventory() -> Result<(), Failed> {
    let paths = vector_paths()?;
    let mut invalid = 0;
    for path in &paths {
        if load(path)?["valid"] == Value::Bool(false) {
            invalid += 1;
        }
    }
    if paths.len() < MIN_VECTORS || invalid < MIN_INVALID_VECTORS {
        return Err(format!(
            "{} holds {} vectors ({invalid} invalid); expected at least {MIN_VECTORS} ({MIN_INVALID_VECTORS} invalid)",
            vector_dir().display(),
            paths.len()
        )
        .into());
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let mut trials = vec![Trial::test("inventory", check_inventory)];
    // A listing error shows up as the inventory test's failure.
    for path in vector_paths().unwrap_or_default() {
        let name = path.file_stem().map(|stem| stem.to_string_lossy().into_owned()).unwrap_or_default();
        trials.push(Trial::test(name, move || check_vector(&path)));
    }
    libtest_mimic::run(&args, trials).exit();
}
