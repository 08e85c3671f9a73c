//! One interface over both stores (placeholder: being written).
