//! The value of `ASYNC_DOCA_DROM` (a DROM reservation handed to a child through its
//! environment) on arbitrary input: never a panic; whatever parses names a usable registry key
//! and a slot of the table, and prints back to the same reservation.
#![no_main]

use async_doca::drom::ReservationRef;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else { return };
    let Ok(r) = ReservationRef::parse(value) else { return };
    assert!(!r.key.is_empty() && r.key.len() <= 64, "{r:?}");
    assert!(!r.key.starts_with('.') && !r.key.contains(['/', ':', '\0']), "{r:?}");
    assert!(r.slot < 128, "{r:?}");
    let again = format!("{}:{}:{:x}", r.key, r.slot, r.token);
    assert_eq!(ReservationRef::parse(&again).unwrap(), r);
});
