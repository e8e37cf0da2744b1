//! Link specs: the text grammar (`rate=20mbit,delay=20ms,loss=0.5%,queue=100pkt`) and the link settings it edits.
//!
//! A spec text is a partial update: keys it names replace the current setting, the rest stay. The command line
//! applies its spec to the defaults; the control socket applies later specs to the running link, so
//! `loss=100%` starts an outage without touching rate or delay.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

use crate::trace::Trace;
use crate::units::{parse_amount, parse_duration, parse_fraction, parse_rate, Amount};

const KNOWN_KEYS: &str = "rate, trace, delay, jitter, reorder, loss, ge, queue, ecn";

/// Queue limit when the spec names none: the default `txqueuelen` of a Linux interface.
pub const DEFAULT_QUEUE_LIMIT: Amount = Amount::Packets(1000);

/// A spec error names the key and what is wrong with its value.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("`{key}`: {problem}")]
pub struct SpecError {
    pub key: String,
    pub problem: String,
}

impl SpecError {
    fn new(key: &str, problem: impl Into<String>) -> SpecError {
        SpecError { key: key.to_owned(), problem: problem.into() }
    }
}

/// Gilbert-Elliott loss: a two-state Markov chain stepped once per packet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GilbertElliott {
    /// Probability of moving from the good to the bad state after a packet.
    pub good_to_bad: f64,
    /// Probability of moving from the bad to the good state after a packet.
    pub bad_to_good: f64,
    pub loss_good: f64,
    pub loss_bad: f64,
}

impl GilbertElliott {
    /// Long-run loss rate: the stationary probability of each state times its loss probability.
    pub fn mean_loss(&self) -> f64 {
        let transitions = self.good_to_bad + self.bad_to_good;
        if transitions == 0.0 {
            return self.loss_good;
        }
        (self.bad_to_good * self.loss_good + self.good_to_bad * self.loss_bad) / transitions
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum LossSpec {
    Bernoulli(f64),
    GilbertElliott(GilbertElliott),
}

/// How the bottleneck serves its queue.
#[derive(Clone, Debug, PartialEq)]
pub enum Service {
    /// No rate limit: packets leave the queue as soon as they enter it.
    Unlimited,
    /// Constant rate over the packet's IP bytes.
    Rate { bits_per_second: u64 },
    /// Mahimahi trace: one packet per delivery opportunity.
    Trace { path: PathBuf, trace: Arc<Trace> },
}

/// Everything that defines one direction of the emulated link.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkSpec {
    pub service: Service,
    pub delay: Duration,
    /// Each packet's delay is `delay` plus a uniform sample in [-jitter, +jitter] (never below zero).
    pub jitter: Duration,
    /// Whether jitter may reorder packets; without it a packet never leaves before the one ahead of it.
    pub reorder: bool,
    pub loss: LossSpec,
    pub queue_limit: Amount,
    /// Mark ECN-capable packets CE when the queue, counting the arriving packet, holds more than this.
    pub ecn_threshold: Option<Amount>,
}

impl Default for LinkSpec {
    fn default() -> LinkSpec {
        LinkSpec {
            service: Service::Unlimited,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            reorder: false,
            loss: LossSpec::Bernoulli(0.0),
            queue_limit: DEFAULT_QUEUE_LIMIT,
            ecn_threshold: None,
        }
    }
}

/// The keys one spec text sets; `None` leaves a setting as it is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecUpdate {
    pub rate: Option<u64>,
    pub trace: Option<PathBuf>,
    pub delay: Option<Duration>,
    pub jitter: Option<Duration>,
    pub reorder: Option<bool>,
    pub loss: Option<LossSpec>,
    pub queue_limit: Option<Amount>,
    /// `Some(None)` is `ecn=off`.
    pub ecn_threshold: Option<Option<Amount>>,
}

impl SpecUpdate {
    /// Parses `key=value` pairs separated by commas. `ge` takes four comma-separated values.
    pub fn parse(text: &str) -> Result<SpecUpdate, SpecError> {
        let mut entries: Vec<(String, Vec<String>)> = Vec::new();
        for token in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            match token.split_once('=') {
                Some((key, value)) => {
                    let key = key.trim().to_ascii_lowercase();
                    if entries.iter().any(|(seen, _)| *seen == key) {
                        return Err(SpecError::new(&key, "given twice"));
                    }
                    entries.push((key, vec![value.trim().to_owned()]));
                }
                None => match entries.last_mut() {
                    Some((key, values)) if key == "ge" => values.push(token.to_owned()),
                    _ => return Err(SpecError::new(token, "expected key=value")),
                },
            }
        }
        let mut update = SpecUpdate::default();
        for (key, values) in &entries {
            update.set(key, values)?;
        }
        if update.rate.is_some() && update.trace.is_some() {
            return Err(SpecError::new("trace", "conflicts with rate= (a direction has either a rate or a trace)"));
        }
        Ok(update)
    }

    fn set(&mut self, key: &str, values: &[String]) -> Result<(), SpecError> {
        let fail = |problem: String| SpecError::new(key, problem);
        if key != "ge" && values.len() != 1 {
            return Err(fail("takes one value".into()));
        }
        let value = values[0].as_str();
        match key {
            "rate" => self.rate = Some(parse_rate(value).map_err(fail)?),
            "trace" => {
                if value.is_empty() {
                    return Err(fail("needs a file path".into()));
                }
                self.trace = Some(PathBuf::from(value));
            }
            "delay" => self.delay = Some(parse_duration(value).map_err(fail)?),
            "jitter" => self.jitter = Some(parse_duration(value).map_err(fail)?),
            "reorder" => {
                self.reorder = Some(match value {
                    "0" => false,
                    "1" => true,
                    other => return Err(fail(format!("`{other}` must be 0 or 1"))),
                })
            }
            "loss" => {
                self.ensure_one_loss_model(key)?;
                self.loss = Some(LossSpec::Bernoulli(parse_fraction(value).map_err(fail)?));
            }
            "ge" => {
                self.ensure_one_loss_model(key)?;
                self.loss = Some(LossSpec::GilbertElliott(parse_gilbert_elliott(values).map_err(fail)?));
            }
            "queue" => self.queue_limit = Some(parse_queue_limit(value).map_err(fail)?),
            "ecn" => {
                self.ecn_threshold = Some(match value {
                    "off" => None,
                    _ => Some(parse_amount(value).map_err(fail)?),
                })
            }
            other => return Err(SpecError::new(other, format!("unknown key (known keys: {KNOWN_KEYS})"))),
        }
        Ok(())
    }

    fn ensure_one_loss_model(&self, key: &str) -> Result<(), SpecError> {
        match self.loss {
            Some(_) => Err(SpecError::new(key, "conflicts with the other loss model (give either loss= or ge=)")),
            None => Ok(()),
        }
    }
}

fn parse_gilbert_elliott(values: &[String]) -> Result<GilbertElliott, String> {
    let [p, r, good, bad] = values else {
        return Err(format!("takes four values p,r,loss_good,loss_bad; got {}", values.len()));
    };
    let fraction = |name: &str, text: &str| parse_fraction(text).map_err(|e| format!("{name}: {e}"));
    Ok(GilbertElliott {
        good_to_bad: fraction("p", p)?,
        bad_to_good: fraction("r", r)?,
        loss_good: fraction("loss_good", good)?,
        loss_bad: fraction("loss_bad", bad)?,
    })
}

fn parse_queue_limit(value: &str) -> Result<Amount, String> {
    let amount = parse_amount(value)?;
    if matches!(amount, Amount::Packets(0) | Amount::Bytes(0)) {
        return Err("must hold at least one packet".into());
    }
    Ok(amount)
}

impl LinkSpec {
    /// Applies an update; a `trace=` key loads and checks the trace file now.
    pub fn updated(&self, update: &SpecUpdate) -> Result<LinkSpec, SpecError> {
        let mut spec = self.clone();
        if let Some(bits_per_second) = update.rate {
            spec.service = Service::Rate { bits_per_second };
        }
        if let Some(path) = &update.trace {
            let trace = Trace::load(path).map_err(|problem| SpecError::new("trace", problem))?;
            spec.service = Service::Trace { path: path.clone(), trace: Arc::new(trace) };
        }
        if let Some(delay) = update.delay {
            spec.delay = delay;
        }
        if let Some(jitter) = update.jitter {
            spec.jitter = jitter;
        }
        if let Some(reorder) = update.reorder {
            spec.reorder = reorder;
        }
        if let Some(loss) = &update.loss {
            spec.loss = loss.clone();
        }
        if let Some(limit) = update.queue_limit {
            spec.queue_limit = limit;
        }
        if let Some(threshold) = update.ecn_threshold {
            spec.ecn_threshold = threshold;
        }
        Ok(spec)
    }

    /// Parses a spec text and applies it to the defaults.
    pub fn parse(text: &str) -> Result<LinkSpec, SpecError> {
        LinkSpec::default().updated(&SpecUpdate::parse(text)?)
    }
}

/// Writes a rate in the largest unit that keeps it an integer (20000000 bit/s prints as 20mbit).
fn write_rate(f: &mut fmt::Formatter<'_>, bits_per_second: u64) -> fmt::Result {
    for (unit, size) in [("gbit", 1_000_000_000), ("mbit", 1_000_000), ("kbit", 1_000)] {
        if bits_per_second.is_multiple_of(size) {
            return write!(f, "{}{unit}", bits_per_second / size);
        }
    }
    write!(f, "{bits_per_second}bit")
}

/// Writes a duration in ms or s when exact, else in (possibly fractional) microseconds.
fn write_duration(f: &mut fmt::Formatter<'_>, duration: Duration) -> fmt::Result {
    let nanos = duration.as_nanos();
    if nanos != 0 && nanos.is_multiple_of(1_000_000_000) {
        write!(f, "{}s", nanos / 1_000_000_000)
    } else if nanos.is_multiple_of(1_000_000) {
        write!(f, "{}ms", nanos / 1_000_000)
    } else {
        write!(f, "{}us", nanos as f64 / 1e3)
    }
}

fn write_amount(f: &mut fmt::Formatter<'_>, amount: Amount) -> fmt::Result {
    match amount {
        Amount::Packets(packets) => write!(f, "{packets}pkt"),
        Amount::Bytes(bytes) => write!(f, "{bytes}b"),
    }
}

fn percent(fraction: f64) -> f64 {
    // Rounded to 10 significant decimals so that 0.5% prints as 0.5%, not 0.49999999999999994%.
    (fraction * 100.0 * 1e10).round() / 1e10
}

/// Writes the spec in the grammar it was parsed from, with every key, so it can be logged and parsed back.
impl fmt::Display for LinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.service {
            Service::Unlimited => {}
            Service::Rate { bits_per_second } => {
                f.write_str("rate=")?;
                write_rate(f, *bits_per_second)?;
                f.write_str(",")?;
            }
            Service::Trace { path, .. } => write!(f, "trace={},", path.display())?,
        }
        f.write_str("delay=")?;
        write_duration(f, self.delay)?;
        f.write_str(",jitter=")?;
        write_duration(f, self.jitter)?;
        write!(f, ",reorder={},", u8::from(self.reorder))?;
        match &self.loss {
            LossSpec::Bernoulli(p) => write!(f, "loss={}%,", percent(*p))?,
            LossSpec::GilbertElliott(ge) => write!(
                f,
                "ge={}%,{}%,{}%,{}%,",
                percent(ge.good_to_bad),
                percent(ge.bad_to_good),
                percent(ge.loss_good),
                percent(ge.loss_bad)
            )?,
        }
        f.write_str("queue=")?;
        write_amount(f, self.queue_limit)?;
        f.write_str(",ecn=")?;
        match self.ecn_threshold {
            None => f.write_str("off"),
            Some(threshold) => write_amount(f, threshold),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example() {
        let spec = LinkSpec::parse("rate=20mbit,delay=20ms,loss=0.5%,queue=100pkt").unwrap();
        assert_eq!(spec.service, Service::Rate { bits_per_second: 20_000_000 });
        assert_eq!(spec.delay, Duration::from_millis(20));
        assert_eq!(spec.loss, LossSpec::Bernoulli(0.005));
        assert_eq!(spec.queue_limit, Amount::Packets(100));
        assert_eq!(spec.ecn_threshold, None);
        assert!(!spec.reorder);
    }

    #[test]
    fn empty_spec_is_an_unlimited_lossless_link() {
        assert_eq!(LinkSpec::parse(""), Ok(LinkSpec::default()));
        assert_eq!(LinkSpec::default().queue_limit, DEFAULT_QUEUE_LIMIT);
    }

    #[test]
    fn gilbert_elliott_takes_four_comma_separated_values() {
        let spec = LinkSpec::parse("delay=5ms,ge=1%,10%,0%,50%,queue=150kb,ecn=30pkt").unwrap();
        let LossSpec::GilbertElliott(ge) = spec.loss else {
            panic!("expected Gilbert-Elliott, got {:?}", spec.loss);
        };
        assert_eq!((ge.good_to_bad, ge.bad_to_good, ge.loss_good, ge.loss_bad), (0.01, 0.1, 0.0, 0.5));
        assert_eq!(spec.queue_limit, Amount::Bytes(150_000));
        assert_eq!(spec.ecn_threshold, Some(Amount::Packets(30)));
        assert_eq!(spec.delay, Duration::from_millis(5));
    }

    #[test]
    fn errors_name_the_key_and_the_problem() {
        let error = |text: &str| SpecUpdate::parse(text).unwrap_err();
        assert_eq!(error("delay=20").key, "delay");
        assert!(error("delay=20").problem.contains("needs a unit"));
        assert_eq!(error("rate=1mbit,colour=red").key, "colour");
        assert!(error("colour=red").problem.contains("known keys"));
        assert_eq!(error("rate=1mbit,rate=2mbit").problem, "given twice");
        assert_eq!(error("rate=1mbit,trace=x").key, "trace");
        assert!(error("loss=1%,ge=1%,1%,1%,1%").problem.contains("loss model"));
        assert!(error("ge=1%,2%").problem.contains("four values"));
        assert!(error("ge=1%,2%,x,4%").problem.contains("loss_good"));
        assert_eq!(error("delay=1ms,5ms").key, "5ms");
        assert!(error("queue=0pkt").problem.contains("at least one packet"));
        assert!(error("reorder=yes").problem.contains("0 or 1"));
        assert_eq!(error("delay=20").to_string(), "`delay`: `20` needs a unit: us, ms or s");
    }

    #[test]
    fn updates_keep_unnamed_settings() {
        let base = LinkSpec::parse("rate=20mbit,delay=20ms,ecn=10pkt").unwrap();
        let outage = base.updated(&SpecUpdate::parse("loss=100%").unwrap()).unwrap();
        assert_eq!(outage.loss, LossSpec::Bernoulli(1.0));
        assert_eq!(outage.service, base.service);
        assert_eq!(outage.delay, base.delay);
        let no_ecn = outage.updated(&SpecUpdate::parse("ecn=off").unwrap()).unwrap();
        assert_eq!(no_ecn.ecn_threshold, None);
    }

    #[test]
    fn trace_key_loads_the_file_and_reports_its_errors() {
        let dir = std::env::temp_dir().join(format!("linkem-spec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.trace");
        let bad = dir.join("bad.trace");
        std::fs::write(&good, "1\n2\n").unwrap();
        std::fs::write(&bad, "3\n2\n").unwrap();
        let spec = LinkSpec::parse(&format!("trace={}", good.display())).unwrap();
        assert!(matches!(&spec.service, Service::Trace { trace, .. } if trace.period_ms() == 2));
        let error = LinkSpec::parse(&format!("trace={}", bad.display())).unwrap_err();
        assert_eq!(error.key, "trace");
        assert!(error.problem.contains("line 2"), "{}", error.problem);
        let missing = LinkSpec::parse("trace=/nonexistent/linkem.trace").unwrap_err();
        assert!(missing.problem.contains("cannot read"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn display_uses_readable_units() {
        let spec = LinkSpec::parse("rate=20mbit,delay=20ms,jitter=1.5ms,loss=0.5%,queue=150kb").unwrap();
        assert_eq!(spec.to_string(), "rate=20mbit,delay=20ms,jitter=1500us,reorder=0,loss=0.5%,queue=150000b,ecn=off");
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "rate=20mbit,delay=20ms,jitter=2ms,reorder=1,loss=0.5%,queue=100pkt,ecn=30pkt",
            "ge=1%,10%,0%,50%,queue=150kb",
            "rate=1500bit,delay=1.5ms,jitter=250us",
            "rate=2gbit,delay=2s",
            "",
        ] {
            let spec = LinkSpec::parse(text).unwrap();
            assert_eq!(LinkSpec::parse(&spec.to_string()), Ok(spec.clone()), "{spec}");
        }
    }
}
