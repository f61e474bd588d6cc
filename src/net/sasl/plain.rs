//! SASL `PLAIN` (RFC 4616): one message, `authzid NUL authcid NUL passwd`
//! with an empty authzid.

use super::{Exchange, Secret, Step};

pub(super) struct Plain {
    message: Option<Vec<u8>>,
}

impl Plain {
    pub(super) fn new(username: &str, password: &Secret) -> Plain {
        let mut m = Vec::with_capacity(username.len() + password.expose().len() + 2);
        m.push(0);
        m.extend_from_slice(username.as_bytes());
        m.push(0);
        m.extend_from_slice(password.expose().as_bytes());
        Plain { message: Some(m) }
    }
}

impl Exchange for Plain {
    fn step(&mut self, server: Option<&[u8]>) -> Result<Step, String> {
        match (server, self.message.take()) {
            (None, Some(m)) => Ok(Step::Send(m)),
            // The broker answers an accepted PLAIN message with no bytes.
            (Some(_), None) => Ok(Step::Done),
            _ => Err("unexpected PLAIN exchange state".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_message() {
        let mut p = Plain::new("alice", &Secret::new("pw"));
        assert_eq!(p.step(None).unwrap(), Step::Send(b"\0alice\0pw".to_vec()));
        assert_eq!(p.step(Some(b"")).unwrap(), Step::Done);
    }
}
