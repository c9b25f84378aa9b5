//! Who may talk to the daemon: decided once per connection, at accept, from the kernel's
//! record of the peer (`SO_PEERCRED`), never from anything the peer says.

use crate::urom::proto::PeerCred;

/// The daemon's access rule.
#[derive(Debug, Clone)]
pub(crate) struct Access {
    /// The daemon's effective uid: the only one allowed when `allow` is empty.
    pub own_uid: u32,
    /// When not empty: exactly these uids (the daemon's own uid only if listed).
    pub allow: Vec<u32>,
}

impl Access {
    /// `Ok` if `peer` may connect, else the reason to log and send back.
    pub fn check(&self, peer: &PeerCred) -> Result<(), String> {
        let ok = if self.allow.is_empty() { peer.uid == self.own_uid } else { self.allow.contains(&peer.uid) };
        if ok {
            Ok(())
        } else {
            Err(format!("uid {} (pid {}) is not allowed to use this UROM service", peer.uid, peer.pid))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_uid_by_default_exactly_the_list_otherwise() {
        let me = PeerCred { pid: 1, uid: 1000, gid: 1000 };
        let other = PeerCred { pid: 2, uid: 65534, gid: 65534 };
        let own = Access { own_uid: 1000, allow: vec![] };
        assert!(own.check(&me).is_ok());
        assert!(own.check(&other).is_err());
        let list = Access { own_uid: 1000, allow: vec![65534] };
        assert!(list.check(&other).is_ok());
        assert!(list.check(&me).is_err(), "the list replaces the default, it does not extend it");
    }
}
