//! The wall clock, in the unit the store keeps every time in. A leaf, so that the processes'
//! code (`process`) and the store share one clock without depending on each other.

/// Milliseconds since the Unix epoch: the unit of every time column.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

/// A time (ms) as the CLI shows every time: `2026-12-07 20:15:00 UTC`.
pub fn utc_time(ms: i64) -> String {
    use chrono::TimeZone;
    match chrono::Utc.timestamp_millis_opt(ms).single() {
        Some(time) => time.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        None => format!("{ms} ms"),
    }
}

/// The time (ms) a person's `--at` names: an RFC 3339 time (`2026-12-08T09:00:00Z`), a local
/// date and time (`2026-12-08 09:00`, seconds optional, `T` or a space between), or a local
/// time of day (`09:00`: its next coming, today or tomorrow). `now` is the time it is read at.
pub fn parse_at(text: &str, now: i64) -> Result<i64, String> {
    use chrono::{Local, NaiveDate, NaiveDateTime, NaiveTime, TimeZone};
    let text = text.trim();
    let wrong = || {
        format!(
            "'{text}' is not a time (2026-12-08T09:00:00Z, 2026-12-08 09:00, or 09:00 for its \
             next coming)"
        )
    };
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(time.timestamp_millis());
    }
    let local = |naive: NaiveDateTime| {
        Local
            .from_local_datetime(&naive)
            .earliest()
            .map(|time| time.timestamp_millis())
            .ok_or_else(|| format!("'{text}' does not exist in the local time zone"))
    };
    for format in [
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(naive) = NaiveDateTime::parse_from_str(text, format) {
            return local(naive);
        }
    }
    let time = NaiveTime::parse_from_str(text, "%H:%M:%S")
        .or_else(|_| NaiveTime::parse_from_str(text, "%H:%M"))
        .map_err(|_| wrong())?;
    let today: NaiveDate = Local
        .timestamp_millis_opt(now)
        .single()
        .ok_or_else(wrong)?
        .date_naive();
    let at = local(today.and_time(time))?;
    match at > now {
        true => Ok(at),
        false => local(today.succ_opt().ok_or_else(wrong)?.and_time(time)),
    }
}

/// `90`, `90s`, `500ms`, `5m`, `2h`: a duration.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a duration (90, 90s, 500ms, 5m, 2h)"))?;
    let millis = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("'{text}': the unit is one of ms, s, m, h")),
    };
    Ok(std::time::Duration::from_millis(
        number.saturating_mul(millis),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_read_with_or_without_their_unit() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn a_time_is_read_in_each_of_its_forms() {
        let now = parse_at("2026-12-07T12:00:00Z", 0).unwrap();
        assert_eq!(now, 1_796_644_800_000);
        assert_eq!(
            parse_at("2026-12-07T13:00:00+01:00", 0),
            Ok(now),
            "an offset is honoured"
        );
        let local = parse_at("2026-12-08 09:30", now).unwrap();
        assert_eq!(parse_at("2026-12-08T09:30:00", now), Ok(local));
        assert_eq!(utc_time(now), "2026-12-07 12:00:00 UTC");
        // A time of day: its next coming, after now.
        let next = parse_at("09:30", local - 1_000).unwrap();
        assert_eq!(next, local);
        assert_eq!(parse_at("09:30", local).unwrap(), local + 86_400_000);
        for wrong in ["soon", "25:00", "2026-13-01 09:00", ""] {
            assert!(parse_at(wrong, now).is_err(), "{wrong}");
        }
    }
}
