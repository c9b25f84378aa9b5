//! In-process tests of the registry (the cross-process ones are in `tests/drom.rs`).

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;
use crate::{CpuSet, ErrorKind};

/// A registry key of its own per test, removed at the end.
struct Key(String);

impl Key {
    fn new(name: &str) -> Key {
        static N: AtomicUsize = AtomicUsize::new(0);
        Key(format!("unit-{}-{}-{name}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)))
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        let _ = Registry::remove(&self.0);
    }
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn reservation_values_from_the_environment_are_checked() {
    let r = ReservationRef::parse("my-key.1:7:1f").unwrap();
    assert_eq!((r.key, r.slot, r.token), ("my-key.1", 7, 0x1f));
    // A key may not contain ':' (the file-name rule), so the split from the right is exact.
    for bad in [
        "",
        ":",
        "::",
        "k:1",
        "k:x:1f",
        "k:1:zz",
        ":1:1f",
        "../etc:1:1f",
        ".hidden:1:1f",
        "a/b:1:1f",
        "k:128:1f",
        "k:-1:1f",
        "k:1:10000000000000000",
        "k:1:1f:",
        "k\0:1:1f",
    ] {
        let e = ReservationRef::parse(bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad:?}");
    }
    // What a launcher writes parses back.
    let k = Key::new("roundtrip");
    let reg = Registry::open(&k.0).unwrap();
    let res = reg.pre_init(&"0".parse::<CpuSet>().unwrap(), Flags::STEAL_CPUS).unwrap();
    let (_, value) = res.env();
    let parsed = ReservationRef::parse(&value).unwrap();
    assert_eq!(parsed.key, k.0);
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn attach_without_registry_is_not_found() {
    let k = Key::new("absent");
    let e = Registry::attach(&k.0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(e.context().contains("no registry"), "{e}");
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn registry_file_is_private() {
    let k = Key::new("perm");
    let reg = Registry::open(&k.0).unwrap();
    let meta = std::fs::metadata(reg.path()).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    // A file others may write is refused.
    std::fs::set_permissions(reg.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(Registry::attach(&k.0).unwrap_err().kind(), ErrorKind::PermissionDenied);
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn bad_keys_are_refused() {
    for k in ["", "../x", "a/b", ".hidden", &"x".repeat(65)] {
        assert_eq!(Registry::open(k).unwrap_err().kind(), ErrorKind::InvalidArgument, "{k:?}");
    }
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn register_poll_apply_and_unregister() {
    let k = Key::new("cycle");
    let reg = Registry::open(&k.0).unwrap();
    assert!(reg.num_cpus() >= 1);
    let first = reg.system_cpus().iter().next().unwrap();
    let one = CpuSet::from_cpus([first]).unwrap();
    let me = reg.register(&one, Flags::NONE).unwrap();
    // INIT: a second registration of the same process.
    assert_eq!(reg.register(&one, Flags::NONE).unwrap_err().kind(), ErrorKind::BadState);
    assert_eq!(reg.pids().unwrap(), [me.pid()]);
    assert_eq!(me.poll().unwrap(), None, "NOUPDT");
    let all = reg.system_cpus();
    reg.set_mask(me.pid(), &all, Flags::NONE).unwrap();
    assert!(me.is_dirty());
    // PDIRTY: a second change while the first is pending.
    let e = reg.set_mask(me.pid(), &one, Flags::NONE).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadState);
    assert_eq!(me.poll().unwrap(), Some(all));
    assert_eq!(me.applied(&one).unwrap_err().kind(), ErrorKind::BadState, "not the pending mask");
    me.applied(&all).unwrap();
    assert_eq!(me.current(), all);
    assert_eq!(reg.get_mask(me.pid(), Flags::SYNC_QUERY).unwrap(), all);
    // SYNC_NOW on ourselves: applied at once, nothing pending.
    reg.set_mask(me.pid(), &one, Flags::SYNC_NOW).unwrap();
    assert!(!me.is_dirty());
    assert_eq!(me.current(), one);
    drop(me);
    assert!(reg.pids().unwrap().is_empty());
    assert_eq!(reg.free_cpus().unwrap(), all);
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn errors_for_unknown_pids_and_bad_masks() {
    let k = Key::new("errors");
    let reg = Registry::open(&k.0).unwrap();
    let all = reg.system_cpus();
    assert_eq!(reg.set_mask(999_999_999, &all, Flags::NONE).unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(reg.get_mask(999_999_999, Flags::NONE).unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(reg.register(&CpuSet::new(), Flags::NONE).unwrap_err().kind(), ErrorKind::InvalidArgument);
    let outside = CpuSet::from_cpus([crate::cpuset::MAX_CPUS - 1]).unwrap();
    assert_eq!(reg.register(&outside, Flags::NONE).unwrap_err().kind(), ErrorKind::InvalidArgument);
    let me = reg.register(&all, Flags::NONE).unwrap();
    assert_eq!(reg.set_mask(1, &all, Flags::SYNC_NOW).unwrap_err().kind(), ErrorKind::InvalidArgument);
    drop(me);
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn sync_query_times_out_when_nobody_applies() {
    let k = Key::new("timeout");
    let reg = Registry::open(&k.0).unwrap().sync_timeout(Duration::from_millis(50));
    let all = reg.system_cpus();
    let first = CpuSet::from_cpus([all.iter().next().unwrap()]).unwrap();
    let me = reg.register(&first, Flags::NONE).unwrap();
    let target = if all.len() > 1 { all } else { first };
    if target == first {
        return; // one CPU: no change to make
    }
    let e = reg.set_mask(me.pid(), &target, Flags::SYNC_QUERY).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TimedOut);
    assert!(me.is_dirty(), "the change stays pending");
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn reservations_are_adopted_by_token() {
    let k = Key::new("reserve");
    let reg = Registry::open(&k.0).unwrap();
    let all = reg.system_cpus();
    let res = reg.pre_init(&all, Flags::NONE).unwrap();
    let infos = reg.processes().unwrap();
    assert_eq!(infos.len(), 1);
    assert_eq!(infos[0].reserved_by, Some(std::process::id() as i32));
    assert!(reg.pids().unwrap().is_empty(), "a reservation is not a registered process yet");
    // Its CPUs are taken: registering on them needs a steal.
    assert_eq!(reg.register(&all, Flags::NONE).unwrap_err().kind(), ErrorKind::PermissionDenied);
    let (var, value) = res.env();
    assert_eq!(var, ENV_RESERVATION);
    assert_eq!(Membership::adopt(&value.replace(':', ";")).unwrap_err().kind(), ErrorKind::InvalidArgument);
    let me = Membership::adopt(&value).unwrap();
    assert_eq!(me.current(), all);
    assert_eq!(reg.pids().unwrap(), [me.pid()]);
    // Only once.
    assert_eq!(Membership::adopt(&value).unwrap_err().kind(), ErrorKind::NotFound);
    drop(me);
    reg.post_finalize(std::process::id() as i32, Flags::RETURN_STOLEN).unwrap();
    assert_eq!(reg.free_cpus().unwrap(), all);
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn a_dead_holder_of_the_lock_is_repaired() {
    let k = Key::new("repair");
    let reg = Registry::open(&k.0).unwrap();
    let all = reg.system_cpus();
    let me = reg.register(&all, Flags::NONE).unwrap();
    // Simulate a holder that died mid-update: its mark is left and a CPU is claimed twice.
    let t = reg_table(&reg);
    t.writer.store(1, std::sync::atomic::Ordering::Relaxed);
    let other = &t.slots[shm::MAX_PROCS - 1];
    other.current.set(all);
    other.pid.store(me.pid(), std::sync::atomic::Ordering::Relaxed);
    other.start.store(shm::proc_start(me.pid()).unwrap(), std::sync::atomic::Ordering::Relaxed);
    other.state.store(shm::REGISTERED, std::sync::atomic::Ordering::Relaxed);
    let infos = reg.processes().unwrap();
    let owned: Vec<CpuSet> = infos.iter().map(|p| p.mask).collect();
    // Every CPU is owned once: the later slot lost what the earlier one holds, and was dropped.
    assert_eq!(owned, [all]);
    assert_eq!(t.writer.load(std::sync::atomic::Ordering::Relaxed), 0);
    drop(me);
}

fn reg_table(reg: &Registry) -> &shm::Table {
    reg.segment().table()
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn steal_from_another_process_then_recover() {
    let k = Key::new("steal");
    let reg = Registry::open(&k.0).unwrap();
    let all = reg.system_cpus();
    if all.len() < 2 {
        return;
    }
    let mut cpus = all.iter();
    let (a, b) =
        (CpuSet::from_cpus([cpus.next().unwrap()]).unwrap(), CpuSet::from_cpus([cpus.next().unwrap()]).unwrap());
    let both = a.union(&b);
    // A supervised process (as the UROM service registers its workers).
    let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let other = reg.register_pid(child.id() as i32, &both, Flags::NONE).unwrap();
    // Taking its CPU needs STEAL_CPUS; its last CPU cannot be taken at all.
    assert_eq!(reg.register(&b, Flags::NONE).unwrap_err().kind(), ErrorKind::PermissionDenied);
    assert_eq!(reg.register(&both, Flags::STEAL_CPUS).unwrap_err().kind(), ErrorKind::PermissionDenied);
    let me = reg.register(&b, Flags::STEAL_CPUS).unwrap();
    assert_eq!(other.poll().unwrap(), Some(a));
    // Nothing can be taken from it, or given to it, while its change is pending.
    assert_eq!(reg.recover_stolen(other.pid()).unwrap_err().kind(), ErrorKind::BadState);
    other.applied(&a).unwrap();
    let info = reg.processes().unwrap().into_iter().find(|p| p.pid == other.pid()).unwrap();
    assert_eq!((info.mask, info.stolen), (a, b));
    // Still ours: nothing to recover.
    assert!(reg.recover_stolen(other.pid()).unwrap().is_empty());
    drop(me);
    assert_eq!(reg.recover_stolen(other.pid()).unwrap(), b);
    assert_eq!(other.poll().unwrap(), Some(both));
    other.applied(&both).unwrap();
    assert!(reg.processes().unwrap()[0].stolen.is_empty());
    drop(other);
    let _ = child.kill();
    let _ = child.wait();
}
