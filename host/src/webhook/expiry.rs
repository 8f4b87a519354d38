//! When the serving certificate expires: read from the chain's X.509 validity (RFC 5280 §4.1.2.5,
//! DER), for the log's warning and the `/metrics` gauge. Only the few DER elements before the
//! validity are walked; nothing of the certificate is trusted from here (rustls and the API
//! server verify it).

use std::time::{SystemTime, UNIX_EPOCH};

/// A certificate's validity, in seconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
}

impl Validity {
    /// The validity of a chain as a whole: from its latest notBefore to its earliest notAfter.
    /// None when a certificate cannot be read.
    pub fn of_chain<'a>(chain: impl IntoIterator<Item = &'a [u8]>) -> Option<Validity> {
        chain
            .into_iter()
            .try_fold(None, |sum: Option<Validity>, der| {
                let one = validity(der)?;
                Some(Some(match sum {
                    None => one,
                    Some(sum) => Validity {
                        not_before: sum.not_before.max(one.not_before),
                        not_after: sum.not_after.min(one.not_after),
                    },
                }))
            })?
    }

    /// Seconds from `now` to notAfter (negative once expired).
    pub fn seconds_left(&self, now: i64) -> i64 {
        self.not_after - now
    }

    /// Less than a third of its lifetime left at `now` (or expired): when the chart renews a
    /// certificate it generated, and when cert-manager renews one by default. Renewed in time,
    /// a certificate never gets there.
    pub fn renewal_due(&self, now: i64) -> bool {
        let life = (self.not_after - self.not_before).max(0);
        3 * self.seconds_left(now) < life
    }
}

/// Seconds since the Unix epoch, now.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// `seconds` since the epoch as RFC 3339 (UTC, to the second), for logs.
pub fn rfc3339(seconds: i64) -> String {
    let (days, second) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        second / 3600,
        second / 60 % 60,
        second % 60
    )
}

/// The validity of one DER certificate: Certificate ::= SEQUENCE { tbsCertificate SEQUENCE {
/// [0] version OPTIONAL, serialNumber, signature, issuer, validity, ... }, ... }.
pub fn validity(der: &[u8]) -> Option<Validity> {
    let (tag, certificate, _) = element(der)?;
    (tag == SEQUENCE).then_some(())?;
    let (tag, mut tbs, _) = element(certificate)?;
    (tag == SEQUENCE).then_some(())?;
    let (tag, _, rest) = element(tbs)?;
    if tag == VERSION {
        tbs = rest;
    }
    // serialNumber, signature, issuer.
    for _ in 0..3 {
        tbs = element(tbs)?.2;
    }
    let (tag, validity, _) = element(tbs)?;
    (tag == SEQUENCE).then_some(())?;
    let (tag, not_before, rest) = element(validity)?;
    let not_before = time(tag, not_before)?;
    let (tag, not_after, _) = element(rest)?;
    let not_after = time(tag, not_after)?;
    Some(Validity {
        not_before,
        not_after,
    })
}

const SEQUENCE: u8 = 0x30;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// One DER element at the start of `der`: its tag, its contents and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let bytes = usize::from(first & 0x7f);
        if bytes == 0 || bytes > 4 || rest.len() < bytes {
            return None;
        }
        let length = rest[..bytes]
            .iter()
            .fold(0usize, |n, &b| (n << 8) | usize::from(b));
        (length, &rest[bytes..])
    };
    (rest.len() >= length).then(|| (tag, &rest[..length], &rest[length..]))
}

/// UTCTime (YYMMDDHHMMSSZ, years 1950-2049) or GeneralizedTime (YYYYMMDDHHMMSSZ), as RFC 5280
/// requires them written, in seconds since the epoch.
fn time(tag: u8, text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    let (year, rest) = match (tag, text.len()) {
        (UTC_TIME, 12) => {
            let yy: i64 = text[..2].parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &text[2..])
        }
        (GENERALIZED_TIME, 14) => (text[..4].parse().ok()?, &text[4..]),
        _ => return None,
    };
    if !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let field = |at: usize| rest[at..at + 2].parse::<i64>().ok();
    let (month, day) = (field(0)?, field(2)?);
    let (hour, minute, second) = (field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day since 1970-01-01 (the inverse of [`days_from_civil`]).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use tokio_rustls::rustls::pki_types::CertificateDer;
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;

    fn der(pem: &str) -> Vec<u8> {
        CertificateDer::pem_slice_iter(pem.as_bytes())
            .next()
            .unwrap()
            .unwrap()
            .to_vec()
    }

    /// The dates `openssl x509 -noout -dates -dateopt iso_8601` prints for the test pairs
    /// (host/tests/tls): notBefore a UTCTime, notAfter (2126) a GeneralizedTime.
    #[rstest]
    #[case::the_test_ca(include_str!("../../tests/tls/ca.crt"), "2026-12-01T18:23:48Z", "2126-11-07T18:23:48Z")]
    #[case::a_leaf(include_str!("../../tests/tls/renewal-1.crt"), "2026-12-03T15:17:30Z", "2126-11-09T15:17:30Z")]
    fn the_validity_is_what_openssl_reads(
        #[case] pem: &str,
        #[case] not_before: &str,
        #[case] not_after: &str,
    ) {
        let validity = validity(&der(pem)).expect("a certificate");
        assert_eq!(rfc3339(validity.not_before), not_before);
        assert_eq!(rfc3339(validity.not_after), not_after);
    }

    #[test]
    fn a_chain_expires_with_its_first_certificate_to_expire() {
        let (a, b) = (
            der(include_str!("../../tests/tls/ca.crt")),
            der(include_str!("../../tests/tls/renewal-1.crt")),
        );
        let chain = Validity::of_chain([a.as_slice(), b.as_slice()]).unwrap();
        assert_eq!(chain.not_after, validity(&a).unwrap().not_after);
        assert_eq!(chain.not_before, validity(&b).unwrap().not_before);
        assert_eq!(
            Validity::of_chain([a.as_slice(), &b[..10]]),
            None,
            "a chain with a certificate that cannot be read"
        );
    }

    #[rstest]
    #[case::fresh(0, false)]
    #[case::two_thirds_left(300, false)]
    #[case::a_third_left(600, false)]
    #[case::less_than_a_third_left(601, true)]
    #[case::expired(1000, true)]
    fn renewal_is_due_with_less_than_a_third_of_the_lifetime_left(
        #[case] now: i64,
        #[case] due: bool,
    ) {
        let validity = Validity {
            not_before: 0,
            not_after: 900,
        };
        assert_eq!(validity.renewal_due(now), due);
    }

    #[rstest]
    #[case::the_epoch(0, "1970-01-01T00:00:00Z")]
    #[case::a_leap_day(951_782_400, "2000-02-29T00:00:00Z")]
    #[case::before_the_epoch(-1, "1969-12-31T23:59:59Z")]
    fn dates_are_written_as_rfc_3339(#[case] seconds: i64, #[case] text: &str) {
        assert_eq!(rfc3339(seconds), text);
        let (date, time) = text.split_once('T').unwrap();
        let parts: Vec<i64> = date.split('-').map(|p| p.parse().unwrap()).collect();
        let days = days_from_civil(parts[0], parts[1], parts[2]);
        assert_eq!(
            days * 86_400 + seconds.rem_euclid(86_400),
            seconds,
            "{time}"
        );
    }

    #[rstest]
    #[case::not_der(b"not a certificate".as_slice())]
    #[case::cut_short([0x30u8, 0x82, 0x01].as_slice())]
    #[case::empty(b"".as_slice())]
    fn what_is_not_a_certificate_has_no_validity(#[case] der: &[u8]) {
        assert_eq!(validity(der), None);
    }
}
