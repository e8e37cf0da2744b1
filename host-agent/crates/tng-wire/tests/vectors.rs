//! The shared wire vectors (`testdata/wire/*.json`), one test per vector, plus an inventory check so that a
//! missing or emptied directory fails instead of passing vacuously.

mod common;

use std::path::Path;

use common::{from_hex, inventory, load, run, to_hex, vector_dir};
use libtest_mimic::Failed;
use serde_json::{Map, Value};
use tng_wire::{Packet, Payload, VERSION};

const MIN_VECTORS: usize = 20;
const MIN_INVALID_VECTORS: usize = 6;

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
        Payload::Section(section) => fields.extend([
            ("section_version", tng_wire::SECTION_VERSION.into()),
            ("next_hop_port", section.next_hop.port().into()),
            ("next_hop_address", to_hex(&section.next_hop.ip().octets()).into()),
            ("inner", to_hex(section.inner).into()),
        ]),
        Payload::SectionAck(frames) => fields.push(("frames", to_hex(frames).into())),
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
    let (count, invalid) = inventory(&vector_dir(""))?;
    if count < MIN_VECTORS || invalid < MIN_INVALID_VECTORS {
        return Err(format!(
            "{} holds {} vectors ({invalid} invalid); expected at least {MIN_VECTORS} ({MIN_INVALID_VECTORS} invalid)",
            vector_dir("").display(),
            count
        )
        .into());
    }
    Ok(())
}

fn main() {
    run(vector_dir(""), check_inventory, check_vector);
}
