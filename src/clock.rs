//! The wall clock, in the unit the store keeps every time in. A leaf, so that the processes'
//! code (`process`) and the store share one clock without depending on each other.

/// Milliseconds since the Unix epoch: the unit of every time column.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}
