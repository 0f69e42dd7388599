//! `strftime` in the C locale, for the chat templates' `strftime_now` (Llama 3 writes today's
//! date into its system prompt). Time is UTC: the server has no time-zone database to consult.

use std::fmt::Write;
use std::time::{SystemTime, UNIX_EPOCH};

const DAYS: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// A broken-down UTC time.
struct Tm {
    year: i64,
    month: u32, // 1..=12
    day: u32,   // 1..=31
    hour: u32,
    minute: u32,
    second: u32,
    weekday: u32, // 0 = Sunday
    yday: u32,    // 0-based day of the year
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

/// Days since 1970-01-01 to (year, month, day), by counting in 400-year eras.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn tm_from_unix(secs: i64) -> Tm {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400) as u32;
    let (year, month, day) = civil_from_days(days);
    const CUM: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = CUM[(month - 1) as usize] + day - 1 + u32::from(month > 2 && is_leap(year));
    Tm {
        year,
        month,
        day,
        hour: rem / 3600,
        minute: rem / 60 % 60,
        second: rem % 60,
        weekday: (days + 4).rem_euclid(7) as u32, // 1970-01-01 was a Thursday
        yday,
    }
}

/// Formats `secs` (Unix time, UTC) like C's `strftime` in the C locale, with glibc's `-` flag
/// (no padding). An unknown conversion is written as is, as glibc does.
pub fn format_unix(secs: i64, fmt: &str) -> String {
    let t = tm_from_unix(secs);
    let mut out = String::new();
    let mut chars = fmt.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let no_pad = chars.peek() == Some(&'-');
        if no_pad {
            chars.next();
        }
        let Some(conv) = chars.next() else {
            out.push('%');
            break;
        };
        let num = |out: &mut String, v: i64, width: usize, pad: char| {
            if no_pad {
                let _ = write!(out, "{v}");
            } else if pad == ' ' {
                let _ = write!(out, "{v:>width$}");
            } else {
                let _ = write!(out, "{v:0width$}");
            }
        };
        let hour12 = if t.hour.is_multiple_of(12) { 12 } else { t.hour % 12 };
        match conv {
            'a' => out.push_str(&DAYS[t.weekday as usize][..3]),
            'A' => out.push_str(DAYS[t.weekday as usize]),
            'b' | 'h' => out.push_str(&MONTHS[(t.month - 1) as usize][..3]),
            'B' => out.push_str(MONTHS[(t.month - 1) as usize]),
            'C' => num(&mut out, t.year.div_euclid(100), 2, '0'),
            'd' => num(&mut out, t.day.into(), 2, '0'),
            'e' => num(&mut out, t.day.into(), 2, ' '),
            'H' => num(&mut out, t.hour.into(), 2, '0'),
            'I' => num(&mut out, hour12.into(), 2, '0'),
            'j' => num(&mut out, (t.yday + 1).into(), 3, '0'),
            'm' => num(&mut out, t.month.into(), 2, '0'),
            'M' => num(&mut out, t.minute.into(), 2, '0'),
            'S' => num(&mut out, t.second.into(), 2, '0'),
            'p' => out.push_str(if t.hour < 12 { "AM" } else { "PM" }),
            'y' => num(&mut out, t.year.rem_euclid(100), 2, '0'),
            'Y' => {
                let _ = write!(out, "{}", t.year);
            }
            'u' => num(&mut out, if t.weekday == 0 { 7 } else { t.weekday.into() }, 1, '0'),
            'w' => num(&mut out, t.weekday.into(), 1, '0'),
            'D' | 'x' => out.push_str(&format_unix(secs, "%m/%d/%y")),
            'F' => out.push_str(&format_unix(secs, "%Y-%m-%d")),
            'T' | 'X' => out.push_str(&format_unix(secs, "%H:%M:%S")),
            'R' => out.push_str(&format_unix(secs, "%H:%M")),
            'c' => out.push_str(&format_unix(secs, "%a %b %e %H:%M:%S %Y")),
            's' => {
                let _ = write!(out, "{secs}");
            }
            'z' => out.push_str("+0000"),
            'Z' => out.push_str("UTC"),
            'n' => out.push('\n'),
            't' => out.push('\t'),
            '%' => out.push('%'),
            other => {
                out.push('%');
                if no_pad {
                    out.push('-');
                }
                out.push(other);
            }
        }
    }
    out
}

/// The current UTC time, formatted.
pub fn now(fmt: &str) -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    format_unix(secs, fmt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_python_strftime() {
        let g = vllm_rs_testutil::golden("frontend/strftime.json");
        for case in g["cases"].as_array().unwrap() {
            let (ts, fmt) = (case["timestamp"].as_i64().unwrap(), case["format"].as_str().unwrap());
            assert_eq!(format_unix(ts, fmt), case["output"].as_str().unwrap(), "{ts} {fmt}");
        }
    }

    #[test]
    fn calendar_edges() {
        assert_eq!(format_unix(0, "%Y-%m-%d %H:%M:%S %a %j"), "1970-01-01 00:00:00 Thu 001");
        assert_eq!(format_unix(951_782_400, "%Y-%m-%d %A %j"), "2000-02-29 Tuesday 060");
        assert_eq!(format_unix(-1, "%Y-%m-%d %H:%M:%S"), "1969-12-31 23:59:59");
        assert_eq!(format_unix(0, "%q %-q %"), "%q %-q %");
    }
}
