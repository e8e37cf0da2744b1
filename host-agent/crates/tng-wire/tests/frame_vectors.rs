//! The shared frame vectors (`testdata/wire/frames/*.json`), one test per vector, plus an inventory check so that
//! a missing or emptied directory fails instead of passing vacuously. Frames travel sealed, so this codec is their
//! only consumer; the vectors pin the frames wire-format section 7 gives a vector to.

mod common;

use std::path::Path;

use common::{from_hex, inventory, load, run, to_hex, vector_dir};
use libtest_mimic::Failed;
use serde_json::{json, Map, Value};
use tng_wire::{parse_frames, Frame};

const MIN_VALID_VECTORS: usize = 2;
const MIN_INVALID_VECTORS: usize = 3;

/// The parsed frame in the vectors' field vocabulary (wire-format section 9).
fn fields_of(frame: &Frame<'_>) -> Result<Map<String, Value>, String> {
    let fields = match frame {
        Frame::DeliveryForecast { tick, received, cumulative } => json!({
            "frame_type": frame.frame_type(),
            "tick": tick,
            "received": received,
            "cumulative": cumulative,
        }),
        other => return Err(format!("no vector vocabulary for frame type {:#x}", other.frame_type())),
    };
    Ok(fields.as_object().cloned().unwrap_or_default())
}

fn check_vector(path: &Path) -> Result<(), Failed> {
    let vector = load(path)?;
    let bytes = from_hex(vector["hex"].as_str().ok_or("vector has no \"hex\" string")?)?;
    let parsed: Vec<_> = parse_frames(&bytes).collect();
    match vector["valid"].as_bool() {
        Some(true) => {
            let frame = match parsed.as_slice() {
                [Ok(frame)] => frame,
                other => return Err(format!("expected one frame, parsed {other:?}").into()),
            };
            let expected = vector["fields"].as_object().ok_or("valid vector has no \"fields\" object")?;
            let actual = fields_of(frame)?;
            if &actual != expected {
                return Err(format!("parsed {actual:?}, vector says {expected:?}").into());
            }
            let mut encoded = Vec::new();
            frame.encode(&mut encoded);
            if encoded != bytes {
                return Err(
                    format!("re-encoding differs:\n  got  {}\n  want {}", to_hex(&encoded), to_hex(&bytes)).into()
                );
            }
            Ok(())
        }
        Some(false) => {
            let expected = vector["error"].as_str().ok_or("invalid vector has no \"error\" string")?;
            match parsed.last() {
                Some(Err(e)) if e.as_str() == expected => Ok(()),
                Some(Err(e)) => Err(format!("rejected as {} ({e}), expected {expected}", e.as_str()).into()),
                _ => Err(format!("accepted, expected {expected}: {parsed:?}").into()),
            }
        }
        None => Err("vector has no boolean \"valid\"".into()),
    }
}

fn check_inventory() -> Result<(), Failed> {
    let (count, invalid) = inventory(&vector_dir("frames"))?;
    if count - invalid < MIN_VALID_VECTORS || invalid < MIN_INVALID_VECTORS {
        return Err(format!(
            "{} holds {} vectors ({invalid} invalid); expected at least {MIN_VALID_VECTORS} valid and \
             {MIN_INVALID_VECTORS} invalid",
            vector_dir("frames").display(),
            count
        )
        .into());
    }
    Ok(())
}

fn main() {
    run(vector_dir("frames"), check_inventory, check_vector);
}
