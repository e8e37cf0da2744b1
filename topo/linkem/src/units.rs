//! Numbers with units as they appear in link specs: rates, durations, fractions and queue sizes.
//!
//! Every parser returns a message that names the offending text, so the spec parser only has to prefix the key.

use std::time::Duration;

/// Largest accepted rate: far beyond what a user-space emulator can forward, so it only rejects typos.
const MAX_BITS_PER_SECOND: f64 = 1e12;
/// Largest accepted duration (delay, jitter): one hour.
const MAX_DURATION_SECONDS: f64 = 3600.0;
/// Largest accepted queue size, in packets or bytes.
const MAX_AMOUNT: f64 = 1e12;

/// A queue size or threshold, counted either in packets or in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Amount {
    Packets(u64),
    Bytes(u64),
}

/// Splits `20mbit` into `(20.0, "mbit")`; the unit is lowercased so `20Mbit` works too.
fn split_number(text: &str) -> Result<(f64, String), String> {
    let text = text.trim();
    let unit_start = text.find(|c: char| c.is_ascii_alphabetic() || c == '%').unwrap_or(text.len());
    let (number, unit) = text.split_at(unit_start);
    if number.is_empty() {
        return Err(format!("`{text}` has no number"));
    }
    let value: f64 = number.parse().map_err(|_| format!("`{number}` is not a number"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("`{number}` must be a finite number >= 0"));
    }
    Ok((value, unit.to_ascii_lowercase()))
}

/// Parses a rate such as `20mbit` into bits per second (decimal prefixes: 1 kbit = 1000 bit).
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let (value, unit) = split_number(text)?;
    let multiplier = match unit.as_str() {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "" => return Err(format!("`{text}` needs a unit: bit, kbit, mbit or gbit")),
        other => return Err(format!("unknown rate unit `{other}` (use bit, kbit, mbit or gbit)")),
    };
    let bits_per_second = value * multiplier;
    if bits_per_second < 1.0 {
        return Err(format!("`{text}` is below 1 bit/s (for an outage use loss=100%)"));
    }
    if bits_per_second > MAX_BITS_PER_SECOND {
        return Err(format!("`{text}` is above 1000 gbit"));
    }
    Ok(bits_per_second.round() as u64)
}

/// Parses a duration such as `20ms` (units us, ms, s).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (value, unit) = split_number(text)?;
    let seconds = match unit.as_str() {
        "us" => value * 1e-6,
        "ms" => value * 1e-3,
        "s" => value,
        "" => return Err(format!("`{text}` needs a unit: us, ms or s")),
        other => return Err(format!("unknown time unit `{other}` (use us, ms or s)")),
    };
    if seconds > MAX_DURATION_SECONDS {
        return Err(format!("`{text}` is longer than one hour"));
    }
    Ok(Duration::from_nanos((seconds * 1e9).round() as u64))
}

/// Parses a probability written either as a percentage (`0.5%`) or as a plain fraction (`0.005`).
pub fn parse_fraction(text: &str) -> Result<f64, String> {
    let (value, unit) = split_number(text)?;
    let fraction = match unit.as_str() {
        "%" => value / 100.0,
        "" => value,
        other => return Err(format!("unknown unit `{other}` (use % or a plain fraction)")),
    };
    if fraction > 1.0 {
        return Err(format!("`{text}` is above 100% (a plain number is a fraction: write {value}% for percent)"));
    }
    Ok(fraction)
}

/// Parses a queue size: `100pkt`, or bytes as `1500b`, `150kb`, `2mb` (decimal: 1 kb = 1000 bytes).
pub fn parse_amount(text: &str) -> Result<Amount, String> {
    let (value, unit) = split_number(text)?;
    if value > MAX_AMOUNT {
        return Err(format!("`{text}` is too large"));
    }
    match unit.as_str() {
        "pkt" => {
            if value.fract() != 0.0 {
                return Err(format!("`{text}` is not a whole number of packets"));
            }
            Ok(Amount::Packets(value as u64))
        }
        "b" => Ok(Amount::Bytes(value.round() as u64)),
        "kb" => Ok(Amount::Bytes((value * 1e3).round() as u64)),
        "mb" => Ok(Amount::Bytes((value * 1e6).round() as u64)),
        "" => Err(format!("`{text}` needs a unit: pkt, b, kb or mb")),
        other => Err(format!("unknown size unit `{other}` (use pkt, b, kb or mb)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_use_decimal_prefixes_and_ignore_case() {
        assert_eq!(parse_rate("20mbit"), Ok(20_000_000));
        assert_eq!(parse_rate("1.5Gbit"), Ok(1_500_000_000));
        assert_eq!(parse_rate("64kbit"), Ok(64_000));
        assert_eq!(parse_rate("9600bit"), Ok(9600));
    }

    #[test]
    fn rates_without_unit_or_zero_are_rejected() {
        assert!(parse_rate("20").unwrap_err().contains("needs a unit"));
        assert!(parse_rate("0mbit").unwrap_err().contains("below 1 bit/s"));
        assert!(parse_rate("20mbps").unwrap_err().contains("unknown rate unit"));
        assert!(parse_rate("-3mbit").is_err());
        assert!(parse_rate("mbit").unwrap_err().contains("no number"));
    }

    #[test]
    fn durations_accept_us_ms_s() {
        assert_eq!(parse_duration("20ms"), Ok(Duration::from_millis(20)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("20").unwrap_err().contains("needs a unit"));
        assert!(parse_duration("2h").unwrap_err().contains("unknown time unit"));
        assert!(parse_duration("7200s").unwrap_err().contains("one hour"));
    }

    #[test]
    fn fractions_accept_percent_or_plain() {
        assert_eq!(parse_fraction("0.5%"), Ok(0.005));
        assert_eq!(parse_fraction("0.25"), Ok(0.25));
        assert_eq!(parse_fraction("100%"), Ok(1.0));
        assert!(parse_fraction("5").unwrap_err().contains("write 5% for percent"));
        assert!(parse_fraction("101%").is_err());
    }

    #[test]
    fn amounts_count_packets_or_bytes() {
        assert_eq!(parse_amount("100pkt"), Ok(Amount::Packets(100)));
        assert_eq!(parse_amount("150kb"), Ok(Amount::Bytes(150_000)));
        assert_eq!(parse_amount("1500b"), Ok(Amount::Bytes(1500)));
        assert_eq!(parse_amount("2mb"), Ok(Amount::Bytes(2_000_000)));
        assert!(parse_amount("1.5pkt").unwrap_err().contains("whole number"));
        assert!(parse_amount("100").unwrap_err().contains("needs a unit"));
    }
}
