//! The wall clock, in the unit the store keeps every time in. A leaf, so that the processes'
//! code (`process`) and the store share one clock without depending on each other.

/// Milliseconds since the Unix epoch: the unit of every time column.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

/// The clock schedules fire by (`store::schedules`): the wall clock, unless the variable
/// `CORRAL_TEST_CLOCK` names a time (RFC 3339): then it reads that time when it is first read
/// and runs on from it at the wall clock's pace. The tests set it to drive a cron schedule
/// to its next firing without waiting for the wall clock's minutes; nothing else is shifted
/// (prompts, runs and events keep the wall clock's times).
pub fn schedule_now() -> i64 {
    // The offset first: its first reading reads the wall clock too, which must not be later
    // than the one it is added to (the clock would start a millisecond early).
    let offset = schedule_offset();
    now_ms() + offset
}

/// How far the schedules' clock is ahead of the wall clock (ms; 0 but in tests).
pub fn schedule_offset() -> i64 {
    static OFFSET: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *OFFSET.get_or_init(|| {
        std::env::var(crate::env::TEST_CLOCK)
            .ok()
            .and_then(|start| chrono::DateTime::parse_from_rfc3339(start.trim()).ok())
            .map(|start| start.timestamp_millis() - now_ms())
            .unwrap_or(0)
    })
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

/// A schedule's times: a cron expression (standard five fields, `minute hour day month
/// weekday`, or six with seconds first; `@daily` and the like), read in the local time zone.
#[derive(Debug, Clone)]
pub struct CronTimes(croner::Cron);

impl CronTimes {
    /// Reads `text`; refused when it is not cron, or when it names no time to come (`0 0 30 2
    /// *`: the 30th of February).
    pub fn parse(text: &str, now: i64) -> Result<CronTimes, String> {
        let cron = croner::parser::CronParser::builder()
            .year(croner::parser::Year::Disallowed)
            .build()
            .parse(text.trim())
            .map_err(|error| format!("'{text}' is not a cron expression: {error}"))?;
        let times = CronTimes(cron);
        match times.next_after(now) {
            Some(_) => Ok(times),
            None => Err(format!("'{text}' never fires")),
        }
    }

    /// The first time (ms) it names after `after`, if any.
    pub fn next_after(&self, after: i64) -> Option<i64> {
        use chrono::TimeZone;
        let start = chrono::Local.timestamp_millis_opt(after).single()?;
        let next = self.0.find_next_occurrence(&start, false).ok()?;
        Some(next.timestamp_millis())
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
    fn cron_times_come_in_order_and_an_impossible_one_is_refused() {
        let now = parse_at("2026-12-07T12:00:00Z", 0).unwrap();
        let every_minute = CronTimes::parse("* * * * *", now).unwrap();
        let next = every_minute.next_after(now).unwrap();
        assert_eq!(next, now + 60_000, "the next minute, not this one");
        assert_eq!(every_minute.next_after(next), Some(next + 60_000));
        let seconds = CronTimes::parse("*/10 * * * * *", now).unwrap();
        assert_eq!(seconds.next_after(now), Some(now + 10_000));
        assert!(CronTimes::parse("@daily", now).is_ok());
        let hourly = CronTimes::parse("0 * * * *", now).unwrap();
        assert_eq!(
            hourly.next_after(now),
            Some(now + 3_600_000),
            "not the hour it is"
        );
        assert_eq!(
            hourly.next_after(now + 500),
            Some(now + 3_600_000),
            "within its second"
        );
        for wrong in ["", "soon", "61 * * * *", "* * * *", "0 0 30 2 *"] {
            assert!(CronTimes::parse(wrong, now).is_err(), "{wrong}");
        }
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
