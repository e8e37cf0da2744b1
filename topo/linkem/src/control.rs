//! The control socket: a Unix stream socket speaking one JSON object per line in each direction.
//!
//! Requests: `{"cmd":"set","dir":"ab"|"ba"|"both","spec":"loss=100%"}` changes the named keys of a running
//! direction; `{"cmd":"get"}` returns both specs in full; `{"cmd":"counters"}` returns both directions' counters;
//! `{"cmd":"reset","seed":N}` starts both directions over at one instant (trace at time 0, loss and jitter re-seeded)
//! and answers that instant. Every answer carries `"ok"`; a failed request answers `{"ok":false,"error":"..."}` and
//! changes nothing.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::bridge::{Clock, DirectionHandle};
use crate::spec::{LinkSpec, SpecUpdate};

#[derive(Debug, Deserialize)]
#[serde(tag = "cmd", rename_all = "lowercase")]
enum Request {
    Set { dir: DirectionSelector, spec: String },
    Get,
    Counters,
    Reset { seed: u64 },
}

/// How long a reset waits for both forwarding threads to apply it. They are woken at once and apply it before their
/// next frame, so only a thread that has stopped takes this long.
const RESET_CONFIRMATION_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum DirectionSelector {
    Ab,
    Ba,
    Both,
}

/// One direction as the control socket sees it: its current spec and the handle that changes it.
#[derive(Debug)]
pub struct ControlledDirection {
    name: &'static str,
    spec: Mutex<LinkSpec>,
    handle: DirectionHandle,
}

impl ControlledDirection {
    pub fn new(name: &'static str, spec: LinkSpec, handle: DirectionHandle) -> ControlledDirection {
        ControlledDirection { name, spec: Mutex::new(spec), handle }
    }

    fn current_spec(&self) -> LinkSpec {
        // A poisoned lock only means another connection's thread panicked; the spec itself is still whole.
        self.spec.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[derive(Debug)]
pub struct Control {
    ab: ControlledDirection,
    ba: ControlledDirection,
    clock: Clock,
}

fn failure(message: impl std::fmt::Display) -> Value {
    json!({"ok": false, "error": message.to_string()})
}

impl Control {
    /// `clock` is the forwarding threads' clock: resets are timed on it.
    pub fn new(ab: ControlledDirection, ba: ControlledDirection, clock: Clock) -> Control {
        Control { ab, ba, clock }
    }

    fn selected(&self, selector: DirectionSelector) -> Vec<&ControlledDirection> {
        match selector {
            DirectionSelector::Ab => vec![&self.ab],
            DirectionSelector::Ba => vec![&self.ba],
            DirectionSelector::Both => vec![&self.ab, &self.ba],
        }
    }

    /// Answers one request line.
    pub fn handle_line(&self, line: &str) -> Value {
        let request: Request = match serde_json::from_str(line) {
            Ok(request) => request,
            Err(error) => {
                return failure(format!(
                    "bad request ({error}); expected {{\"cmd\":\"set\",\"dir\":\"ab|ba|both\",\"spec\":\"...\"}}, \
                     {{\"cmd\":\"get\"}}, {{\"cmd\":\"counters\"}} or {{\"cmd\":\"reset\",\"seed\":N}}"
                ))
            }
        };
        match request {
            Request::Set { dir, spec } => self.set(dir, &spec),
            Request::Get => json!({
                "ok": true,
                "ab": self.ab.current_spec().to_string(),
                "ba": self.ba.current_spec().to_string(),
            }),
            Request::Counters => json!({
                "ok": true,
                "ab": self.ab.handle.counters.snapshot(),
                "ba": self.ba.handle.counters.snapshot(),
            }),
            Request::Reset { seed } => self.reset(seed),
        }
    }

    /// Starts both directions over at one instant, chosen here and applied by each forwarding thread, and answers
    /// once both have applied it.
    fn reset(&self, seed: u64) -> Value {
        // Holding both spec locks keeps a concurrent `set` from landing between the two directions' resets.
        let _specs = [&self.ab, &self.ba].map(|d| d.spec.lock().unwrap_or_else(|e| e.into_inner()));
        let origin_ns = self.clock.now_ns();
        let (applied, confirmations) = mpsc::channel();
        for direction in [&self.ab, &self.ba] {
            if let Err(error) = direction.handle.reset(origin_ns, seed, applied.clone()) {
                return failure(format!("{}: {error}", direction.name));
            }
        }
        drop(applied);
        let mut confirmed = Vec::new();
        while confirmed.len() < 2 {
            match confirmations.recv_timeout(RESET_CONFIRMATION_TIMEOUT) {
                Ok(name) => confirmed.push(name),
                Err(_) => {
                    let missing: Vec<&str> =
                        [self.ab.name, self.ba.name].into_iter().filter(|name| !confirmed.contains(name)).collect();
                    return failure(format!("{}: the forwarding thread did not apply the reset", missing.join(", ")));
                }
            }
        }
        json!({
            "ok": true,
            "seed": seed,
            "at_ns": origin_ns,
            "monotonic_ns": self.clock.monotonic_ns(origin_ns),
        })
    }

    /// Validates the update against every selected direction first, so a bad spec changes nothing.
    fn set(&self, selector: DirectionSelector, text: &str) -> Value {
        let update = match SpecUpdate::parse(text) {
            Ok(update) => update,
            Err(error) => return failure(format!("spec: {error}")),
        };
        let directions = self.selected(selector);
        let mut guards: Vec<_> = directions.iter().map(|d| d.spec.lock().unwrap_or_else(|e| e.into_inner())).collect();
        let mut updated = Vec::new();
        for guard in &guards {
            match guard.updated(&update) {
                Ok(spec) => updated.push(spec),
                Err(error) => return failure(format!("spec: {error}")),
            }
        }
        let mut answer = json!({"ok": true});
        for ((direction, guard), spec) in directions.iter().zip(guards.iter_mut()).zip(updated) {
            if let Err(error) = direction.handle.apply(spec.clone()) {
                return failure(format!("{}: {error}", direction.name));
            }
            answer[direction.name] = Value::String(spec.to_string());
            **guard = spec;
        }
        answer
    }
}

/// Binds the control socket (replacing a stale socket file nobody listens on) and serves it from a thread.
pub fn serve(path: &Path, control: Arc<Control>) -> io::Result<()> {
    let listener = match UnixListener::bind(path) {
        Err(error) if error.kind() == io::ErrorKind::AddrInUse => {
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{}: another process is listening there", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
            UnixListener::bind(path)?
        }
        other => other?,
    };
    thread::Builder::new().name("linkem-control".into()).spawn(move || {
        for stream in listener.incoming().flatten() {
            let control = Arc::clone(&control);
            // A connection that cannot get a thread is simply closed; the listener keeps serving.
            let _ = thread::Builder::new()
                .name("linkem-control-conn".into())
                .spawn(move || serve_connection(stream, &control));
        }
    })?;
    Ok(())
}

fn serve_connection(stream: UnixStream, control: &Control) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else {
            return;
        };
        if line.trim().is_empty() {
            continue;
        }
        let answer = control.handle_line(&line);
        if writeln!(writer, "{answer}").is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::{detached_handle, Update};
    use crate::counters::add;
    use crate::spec::LossSpec;

    struct Fixture {
        control: Control,
        ab_updates: mpsc::Receiver<Update>,
        ba_updates: mpsc::Receiver<Update>,
        _wakes: [UnixStream; 2],
    }

    fn applied_spec(updates: &mpsc::Receiver<Update>) -> LinkSpec {
        match updates.try_recv() {
            Ok(Update::Spec(spec)) => spec,
            other => panic!("expected a spec update, got {other:?}"),
        }
    }

    fn fixture() -> Fixture {
        let (ab, ab_updates, ab_wake) = detached_handle();
        let (ba, ba_updates, ba_wake) = detached_handle();
        let spec = LinkSpec::parse("rate=20mbit,delay=20ms").unwrap();
        Fixture {
            control: Control::new(
                ControlledDirection::new("ab", spec.clone(), ab),
                ControlledDirection::new("ba", spec, ba),
                Clock::start(),
            ),
            ab_updates,
            ba_updates,
            _wakes: [ab_wake, ba_wake],
        }
    }

    #[test]
    fn set_changes_only_the_named_keys_of_the_named_direction() {
        let f = fixture();
        let answer = f.control.handle_line(r#"{"cmd":"set","dir":"ab","spec":"loss=100%"}"#);
        assert_eq!(answer["ok"], true, "{answer}");
        let applied = applied_spec(&f.ab_updates);
        assert_eq!(applied.loss, LossSpec::Bernoulli(1.0));
        assert_eq!(applied.delay, std::time::Duration::from_millis(20));
        assert!(f.ba_updates.try_recv().is_err());
        let get = f.control.handle_line(r#"{"cmd":"get"}"#);
        assert!(get["ab"].as_str().unwrap().contains("loss=100%"), "{get}");
        assert!(get["ba"].as_str().unwrap().contains("loss=0%"), "{get}");
    }

    #[test]
    fn a_bad_spec_changes_nothing_and_names_the_key() {
        let f = fixture();
        let answer = f.control.handle_line(r#"{"cmd":"set","dir":"both","spec":"delay=5ms,loss=7"}"#);
        assert_eq!(answer["ok"], false);
        assert!(answer["error"].as_str().unwrap().contains("`loss`"), "{answer}");
        assert!(f.ab_updates.try_recv().is_err() && f.ba_updates.try_recv().is_err());
        let both = f.control.handle_line(r#"{"cmd":"set","dir":"both","spec":"delay=5ms"}"#);
        assert_eq!(both["ok"], true);
        applied_spec(&f.ab_updates);
        applied_spec(&f.ba_updates);
    }

    /// Plays both forwarding threads: takes one reset from each direction and confirms it.
    fn confirm_resets(f: &Fixture) -> [(u64, u64); 2] {
        [&f.ab_updates, &f.ba_updates].map(|updates| {
            match updates.recv_timeout(Duration::from_secs(5)).expect("a reset reaches the forwarding thread") {
                Update::Reset { origin_ns, seed, applied } => {
                    applied.send("x").unwrap();
                    (origin_ns, seed)
                }
                other => panic!("expected a reset, got {other:?}"),
            }
        })
    }

    #[test]
    fn reset_gives_both_directions_one_instant_and_answers_it_on_clock_monotonic() {
        let f = fixture();
        let before = f.control.clock.monotonic_ns(f.control.clock.now_ns());
        let answer = thread::scope(|scope| {
            let answering = scope.spawn(|| f.control.handle_line(r#"{"cmd":"reset","seed":42}"#));
            let [ab, ba] = confirm_resets(&f);
            assert_eq!(ab, ba, "one instant and one seed for both directions");
            assert_eq!(ab.1, 42);
            let answer = answering.join().unwrap();
            assert_eq!(answer["at_ns"], ab.0, "{answer}");
            answer
        });
        assert_eq!(answer["ok"], true, "{answer}");
        assert_eq!(answer["seed"], 42);
        let monotonic = answer["monotonic_ns"].as_u64().unwrap();
        let reading = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let after = reading.tv_sec as u64 * 1_000_000_000 + reading.tv_nsec as u64;
        assert!(before <= monotonic && monotonic <= after, "{before} <= {monotonic} <= {after}");
    }

    #[test]
    fn reset_needs_a_seed_and_running_forwarding_threads() {
        let f = fixture();
        let answer = f.control.handle_line(r#"{"cmd":"reset"}"#);
        assert_eq!(answer["ok"], false);
        assert!(answer["error"].as_str().unwrap().contains("seed"), "{answer}");
        assert!(f.ab_updates.try_recv().is_err() && f.ba_updates.try_recv().is_err());
        drop(f.ba_updates);
        let answer = f.control.handle_line(r#"{"cmd":"reset","seed":1}"#);
        assert_eq!(answer["ok"], false);
        assert_eq!(answer["error"], "ba: the forwarding thread has stopped", "{answer}");
    }

    #[test]
    fn counters_and_malformed_requests() {
        let f = fixture();
        add(&f.control.ab.handle.counters.dropped_loss, 3);
        let counters = f.control.handle_line(r#"{"cmd":"counters"}"#);
        assert_eq!(counters["ok"], true);
        assert_eq!(counters["ab"]["dropped_loss"], 3);
        assert_eq!(counters["ba"]["forwarded_packets"], 0);
        for bad in
            ["not json", r#"{"cmd":"reboot"}"#, r#"{"cmd":"set","dir":"up","spec":""}"#, r#"{"cmd":"reset","seed":-1}"#]
        {
            let answer = f.control.handle_line(bad);
            assert_eq!(answer["ok"], false, "{bad}");
            assert!(answer["error"].as_str().unwrap().starts_with("bad request"));
        }
    }

    #[test]
    fn serves_json_lines_over_a_unix_socket() {
        let path = std::env::temp_dir().join(format!("linkem-control-{}.sock", std::process::id()));
        let f = fixture();
        serve(&path, Arc::new(f.control)).unwrap();
        let stream = UnixStream::connect(&path).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        writeln!(&stream, r#"{{"cmd":"counters"}}"#).unwrap();
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let answer: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(answer["ok"], true);
        assert_eq!(answer["ab"]["packets_in"], 0);
        std::fs::remove_file(&path).unwrap();
    }
}
