//! Structure-aware `doca_sync_event_create_from_export`: the input is an edit program (see
//! `doca_soft_fuzz::edit`) applied to one of two valid exports of events started once in
//! this process (PCI flavour, remote-net flavour), with the checksum recomputed unless the
//! program says otherwise. The unedited blob must import; every import that succeeds is
//! destroyed again.
#![no_main]

use std::ptr;
use std::sync::OnceLock;

use doca_soft::sync_event::*;
use doca_soft_fuzz::{check_fd_leaks, device, edit, ok, sync_event_import, Ptr};
use libfuzzer_sys::fuzz_target;

/// The live objects that own the exports, and the exports.
type Exports = (Vec<Ptr<doca_sync_event>>, Vec<Vec<u8>>);

/// The valid exports (owned by events that stay started for the whole run).
fn bases() -> &'static [Vec<u8>] {
    static BASES: OnceLock<Exports> = OnceLock::new();
    &BASES
        .get_or_init(|| {
            let dev = device();
            let mut events = Vec::new();
            let mut blobs = Vec::new();
            for net in [false, true] {
                let mut e = ptr::null_mut();
                let (mut p, mut n) = (ptr::null(), 0usize);
                // SAFETY: valid out-pointers; the blob is owned by the event, which lives (and
                // stays started) for the whole run.
                unsafe {
                    ok(doca_sync_event_create(&mut e), "doca_sync_event_create");
                    if net {
                        ok(doca_sync_event_add_publisher_location_remote_net(e), "add_publisher_location_remote_net");
                    } else {
                        ok(doca_sync_event_add_publisher_location_cpu(e, dev), "add_publisher_location_cpu");
                    }
                    ok(doca_sync_event_add_subscriber_location_cpu(e, dev), "add_subscriber_location_cpu");
                    ok(doca_sync_event_start(e), "doca_sync_event_start");
                    ok(doca_sync_event_update_set(e, 42), "doca_sync_event_update_set");
                    if net {
                        ok(doca_sync_event_export_to_remote_net(e, &mut p, &mut n), "export_to_remote_net");
                    } else {
                        ok(doca_sync_event_export_to_remote_pci(e, dev, &mut p, &mut n), "export_to_remote_pci");
                    }
                    blobs.push(std::slice::from_raw_parts(p, n).to_vec());
                }
                events.push(Ptr(e));
            }
            (events, blobs)
        })
        .1
}

fuzz_target!(|data: &[u8]| {
    let bases = bases();
    let refs: Vec<&[u8]> = bases.iter().map(Vec::as_slice).collect();
    let (which, blob) = edit(&refs, data);
    let imported = sync_event_import(&blob, "sync event import (edited export)");
    if blob == bases[which] {
        assert!(imported, "a valid export of a live event did not import");
    }
    check_fd_leaks();
});
