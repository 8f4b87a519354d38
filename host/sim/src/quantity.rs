//! A small, exact-enough parser for Kubernetes resource quantities.
//!
//! Quantities are `<sign><digits>[.<digits>]<suffix>` where the suffix is a decimal SI
//! suffix (`n u m "" k M G T P E`), a binary SI suffix (`Ki Mi Gi Ti Pi Ei`) or a decimal
//! exponent (`e3`, `E-2`). Values are held in nano-units as `i128`, which is exact for every
//! quantity the simulator meets. The project's authoritative parser lives in the core crate;
//! this one only serves the scheduler and the QoS classifier.

/// Parses a quantity into nano-units (1 = 10^-9 of the base unit), rounding up.
pub fn parse_nano(s: &str) -> Option<i128> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let (neg, rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (num, suffix) = rest.split_at(num_end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return None;
    }
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    let digits = format!("{int_part}{frac_part}");
    let mantissa: i128 = digits.parse().ok()?;
    let frac = frac_part.len() as i32;
    let (pow10, bin): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 1),
        "Mi" => (0, 2),
        "Gi" => (0, 3),
        "Ti" => (0, 4),
        "Pi" => (0, 5),
        "Ei" => (0, 6),
        other => {
            let exp = other.strip_prefix(['e', 'E'])?;
            (exp.parse::<i32>().ok()?, 0)
        }
    };
    let mut value = mantissa.checked_mul(1024i128.checked_pow(bin)?)?;
    let exp = 9 + pow10 - frac;
    if exp >= 0 {
        value = value.checked_mul(10i128.checked_pow(exp as u32)?)?;
    } else {
        let div = 10i128.checked_pow((-exp) as u32)?;
        value = (value + div - 1) / div;
    }
    Some(if neg { -value } else { value })
}

/// CPU in millicores (rounded up).
pub fn millicores(s: &str) -> Option<i128> {
    parse_nano(s).map(|n| ceil_div(n, 1_000_000))
}

/// Memory or storage in bytes (rounded up); also used for plain counts.
pub fn units(s: &str) -> Option<i128> {
    parse_nano(s).map(|n| ceil_div(n, 1_000_000_000))
}

fn ceil_div(a: i128, b: i128) -> i128 {
    if a >= 0 { (a + b - 1) / b } else { a / b }
}

/// Reads a resource amount from JSON (a string, or a bare number as some clients send).
pub fn amount(resource: &str, v: &serde_json::Value) -> Option<i128> {
    let s = match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        _ => return None,
    };
    if resource == "cpu" {
        millicores(&s)
    } else {
        units(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(millicores("100m"), Some(100));
        assert_eq!(millicores("0.5"), Some(500));
        assert_eq!(millicores("1"), Some(1000));
        assert_eq!(millicores(".1"), Some(100));
        assert_eq!(millicores("1e3"), Some(1_000_000));
        assert_eq!(units("128Mi"), Some(128 * 1024 * 1024));
        assert_eq!(units("1Gi"), Some(1 << 30));
        assert_eq!(units("1G"), Some(1_000_000_000));
        assert_eq!(units("1.5Gi"), Some(3 << 29));
        assert_eq!(units("100"), Some(100));
        assert_eq!(units("1E-2"), Some(1));
        assert_eq!(units("-1k"), Some(-1000));
        assert_eq!(units(""), None);
        assert_eq!(units("1x"), None);
        assert_eq!(units("1.2.3"), None);
    }
}
