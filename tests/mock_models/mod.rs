//! Loopback mock model servers for the tests; their shared HTTP core is [`http`].

#![allow(dead_code)]

pub mod http;
