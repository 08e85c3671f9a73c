//! Placeholder until the fake engine is written.
fn main() {}
