//! What decides how much a section sends: a congestion controller, or an administratively fixed rate for a section
//! over a link of reserved capacity (Tng section 6.2). Written `cubic`, `vegas`, ... or `fixed:20mbit` in the relay's
//! policy (`tng relay --toward-server-cc`, the simulator's `relay` table).

use std::fmt;
use std::str::FromStr;

use tng_proto::cc::{new_controller, CcConfig, CongestionController, FixedRate, UnknownCc};
use tng_proto::{CcKind, Time};

/// How one direction of a relay's sections decides how much to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionControl {
    /// A congestion controller (Tng's DSL example: CUBIC in the core, Vegas on the last mile).
    Congestion(CcKind),
    /// This many bytes per second, whatever is lost: the link's reserved capacity.
    FixedRate(u64),
}

impl SectionControl {
    /// The controller of a new section that starts at `now`.
    pub fn controller(self, config: &CcConfig, now: Time) -> Box<dyn CongestionController> {
        match self {
            SectionControl::Congestion(kind) => new_controller(kind, config, now),
            SectionControl::FixedRate(bytes_per_second) => Box::new(FixedRate::new(config, bytes_per_second)),
        }
    }
}

impl From<CcKind> for SectionControl {
    fn from(kind: CcKind) -> Self {
        SectionControl::Congestion(kind)
    }
}

impl fmt::Display for SectionControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SectionControl::Congestion(kind) => write!(f, "{kind}"),
            SectionControl::FixedRate(bytes_per_second) => write!(f, "fixed:{}kbit", bytes_per_second * 8 / 1000),
        }
    }
}

/// Text that names neither a controller nor a fixed rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadSectionControl(String);

impl fmt::Display for BadSectionControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadSectionControl {}

impl FromStr for SectionControl {
    type Err = BadSectionControl;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let Some(rate) = text.strip_prefix("fixed:") else {
            return text
                .parse::<CcKind>()
                .map(SectionControl::Congestion)
                .map_err(|UnknownCc(name)| BadSectionControl(format!("{}, or fixed:RATE", UnknownCc(name))));
        };
        let bad = |why: &str| BadSectionControl(format!("fixed rate {rate:?}: {why} (e.g. fixed:20mbit)"));
        let (number, bits_per_unit) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)]
            .into_iter()
            .find_map(|(unit, scale)| rate.strip_suffix(unit).map(|number| (number, scale)))
            .ok_or_else(|| bad("give the unit kbit, mbit or gbit"))?;
        let value: f64 = number.parse().map_err(|_| bad("not a number"))?;
        let bytes_per_second = value * bits_per_unit / 8.0;
        if !bytes_per_second.is_finite() || bytes_per_second < 1.0 || bytes_per_second > u64::MAX as f64 {
            return Err(bad("must be at least 8 bit/s"));
        }
        Ok(SectionControl::FixedRate(bytes_per_second.round() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_to_controllers_and_fixed_rates_to_bytes_per_second() {
        assert_eq!("cubic".parse(), Ok(SectionControl::Congestion(CcKind::Cubic)));
        assert_eq!("fixed:20mbit".parse(), Ok(SectionControl::FixedRate(2_500_000)));
        assert_eq!("fixed:1.5gbit".parse(), Ok(SectionControl::FixedRate(187_500_000)));
        assert_eq!("fixed:800kbit".parse(), Ok(SectionControl::FixedRate(100_000)));
        assert_eq!(SectionControl::FixedRate(2_500_000).to_string(), "fixed:20000kbit");
        assert_eq!("fixed:20000kbit".parse(), Ok(SectionControl::FixedRate(2_500_000)));
    }

    #[test]
    fn bad_text_gets_an_error_naming_what_is_wrong() {
        let error = |text: &str| text.parse::<SectionControl>().unwrap_err().to_string();
        assert!(error("reno").contains("unknown congestion controller \"reno\""), "{}", error("reno"));
        assert!(error("reno").ends_with("or fixed:RATE"));
        assert!(error("fixed:20").contains("unit kbit, mbit or gbit"));
        assert!(error("fixed:fastmbit").contains("not a number"));
        assert!(error("fixed:0mbit").contains("at least 8 bit/s"));
        assert!(error("fixed:-1mbit").contains("at least 8 bit/s"));
    }

    #[test]
    fn each_control_builds_its_controller() {
        let config = CcConfig::default();
        assert_eq!(SectionControl::Congestion(CcKind::Vegas).controller(&config, Time::ZERO).name(), "vegas");
        let fixed = SectionControl::FixedRate(2_500_000).controller(&config, Time::ZERO);
        assert_eq!((fixed.name(), fixed.pacing_rate(std::time::Duration::ZERO)), ("fixed", 2_500_000));
    }
}
