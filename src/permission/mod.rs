//! Module reserved for its issue; empty until that lands.
