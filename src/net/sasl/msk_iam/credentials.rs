//! AWS credentials for MSK IAM, from the first two links of the AWS SDKs'
//! default chain: the environment (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), then the shared files
//! (`~/.aws/credentials`, then `~/.aws/config`; `AWS_SHARED_CREDENTIALS_FILE`
//! and `AWS_CONFIG_FILE` move them) for the profile `AWS_PROFILE` (default
//! `default`). Instance metadata (IMDS), SSO, web identity and
//! `credential_process` are not read.
//!
//! Reference: AWS SDKs and Tools Reference Guide, "Standardized credential
//! providers" and "Shared config and credentials files".

use std::path::PathBuf;

use crate::net::sasl::Secret;

/// An AWS access key, its secret and (for temporary credentials) a session
/// token. `Debug` masks the secret and the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsCredentials {
    /// `aws_access_key_id`.
    pub access_key_id: String,
    /// `aws_secret_access_key`.
    pub secret_access_key: Secret,
    /// `aws_session_token`, for temporary (STS) credentials.
    pub session_token: Option<Secret>,
}

/// Where the chain looks: the environment and the home directory, injectable
/// so tests need not touch the process's own.
pub(super) struct Sources<'a> {
    pub env: &'a dyn Fn(&str) -> Option<String>,
    pub home: Option<PathBuf>,
}

impl Sources<'static> {
    pub fn process() -> Sources<'static> {
        Sources {
            env: &|k| std::env::var(k).ok().filter(|v| !v.is_empty()),
            home: std::env::var_os("HOME").map(PathBuf::from),
        }
    }
}

impl Sources<'_> {
    fn credentials_file(&self) -> Option<PathBuf> {
        (self.env)("AWS_SHARED_CREDENTIALS_FILE")
            .map(PathBuf::from)
            .or_else(|| self.home.as_ref().map(|h| h.join(".aws/credentials")))
    }

    fn config_file(&self) -> Option<PathBuf> {
        (self.env)("AWS_CONFIG_FILE")
            .map(PathBuf::from)
            .or_else(|| self.home.as_ref().map(|h| h.join(".aws/config")))
    }

    /// The profile: the explicit one, else `AWS_PROFILE`, else `default`.
    pub fn profile(&self, explicit: Option<&str>) -> String {
        explicit
            .map(str::to_owned)
            .or_else(|| (self.env)("AWS_PROFILE"))
            .unwrap_or_else(|| "default".into())
    }

    /// Credentials from the chain; the error says where it looked.
    pub fn credentials(&self, profile: Option<&str>) -> Result<AwsCredentials, String> {
        // An explicitly named profile skips the environment's keys, as the
        // AWS SDKs do when a profile is selected in code.
        if profile.is_none() {
            if let (Some(id), Some(secret)) = (
                (self.env)("AWS_ACCESS_KEY_ID"),
                (self.env)("AWS_SECRET_ACCESS_KEY"),
            ) {
                return Ok(AwsCredentials {
                    access_key_id: id,
                    secret_access_key: Secret::new(secret),
                    session_token: (self.env)("AWS_SESSION_TOKEN").map(Secret::new),
                });
            }
        }
        let name = self.profile(profile);
        for (file, section) in [
            (self.credentials_file(), name.clone()),
            (self.config_file(), config_section(&name)),
        ] {
            let Some(path) = file else { continue };
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let keys = ini_section(&text, &section);
            let get = |k: &str| {
                keys.iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| v.clone())
                    .filter(|v| !v.is_empty())
            };
            if let (Some(id), Some(secret)) =
                (get("aws_access_key_id"), get("aws_secret_access_key"))
            {
                return Ok(AwsCredentials {
                    access_key_id: id,
                    secret_access_key: Secret::new(secret),
                    session_token: get("aws_session_token").map(Secret::new),
                });
            }
        }
        Err(format!(
            "no AWS credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY unset{} and profile `{name}` has no aws_access_key_id/aws_secret_access_key in {} or {} (IMDS, SSO and credential_process are not read)",
            if profile.is_some() { " or skipped for an explicit profile" } else { "" },
            self.credentials_file().map(|p| p.display().to_string()).unwrap_or_else(|| "~/.aws/credentials (no HOME)".into()),
            self.config_file().map(|p| p.display().to_string()).unwrap_or_else(|| "~/.aws/config (no HOME)".into()),
        ))
    }

    /// The region: `AWS_REGION`, else `AWS_DEFAULT_REGION`, else the
    /// profile's `region` in the config file.
    pub fn region(&self, profile: Option<&str>) -> Option<String> {
        (self.env)("AWS_REGION")
            .or_else(|| (self.env)("AWS_DEFAULT_REGION"))
            .or_else(|| {
                let text = std::fs::read_to_string(self.config_file()?).ok()?;
                let section = config_section(&self.profile(profile));
                ini_section(&text, &section)
                    .into_iter()
                    .find(|(k, _)| k == "region")
                    .map(|(_, v)| v)
            })
    }
}

/// The config file names profiles `[profile NAME]`, except `[default]`.
fn config_section(profile: &str) -> String {
    if profile == "default" {
        profile.to_owned()
    } else {
        format!("profile {profile}")
    }
}

/// The `key = value` pairs of section `[name]` of an INI text (keys
/// lower-cased; `#` and `;` start comment lines; sections repeated are
/// merged, later keys last).
fn ini_section(text: &str, name: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let header = header.split_whitespace().collect::<Vec<_>>().join(" ");
            inside = header == name;
            continue;
        }
        if inside {
            if let Some((k, v)) = line.split_once('=') {
                out.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
            }
        }
    }
    out.reverse(); // `find` then sees the last definition first
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with_env<R>(
        vars: &[(&str, &str)],
        home: Option<PathBuf>,
        f: impl FnOnce(&Sources) -> R,
    ) -> R {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let env = move |k: &str| map.get(k).cloned();
        f(&Sources { env: &env, home })
    }

    fn temp_home(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "purekafka-aws-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(dir.join(".aws")).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(".aws").join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn environment_comes_first() {
        let home = temp_home(&[(
            "credentials",
            "[default]\naws_access_key_id=FILE\naws_secret_access_key=f\n",
        )]);
        let c = with_env(
            &[
                ("AWS_ACCESS_KEY_ID", "ENVKEY"),
                ("AWS_SECRET_ACCESS_KEY", "envsecret"),
                ("AWS_SESSION_TOKEN", "envtoken"),
            ],
            Some(home.clone()),
            |s| s.credentials(None),
        )
        .unwrap();
        assert_eq!(c.access_key_id, "ENVKEY");
        assert_eq!(c.secret_access_key.expose(), "envsecret");
        assert_eq!(c.session_token.unwrap().expose(), "envtoken");
        // Only the id set: the environment is incomplete, the file answers.
        let c = with_env(
            &[("AWS_ACCESS_KEY_ID", "ENVKEY")],
            Some(home.clone()),
            |s| s.credentials(None),
        )
        .unwrap();
        assert_eq!(c.access_key_id, "FILE");
        std::fs::remove_dir_all(home).unwrap();
    }

    #[test]
    fn profiles_from_both_files() {
        let home = temp_home(&[
            (
                "credentials",
                "# comment\n[default]\naws_access_key_id = DEF\naws_secret_access_key = defsecret\n\n[dev]\naws_access_key_id=DEV\naws_secret_access_key=devsecret\naws_session_token=devtoken\n",
            ),
            (
                "config",
                "[default]\nregion = eu-west-1\n[profile ops]\nregion=ap-south-1\naws_access_key_id=OPS\naws_secret_access_key=opssecret\n",
            ),
        ]);
        with_env(&[], Some(home.clone()), |s| {
            assert_eq!(s.credentials(None).unwrap().access_key_id, "DEF");
            assert_eq!(s.region(None).as_deref(), Some("eu-west-1"));
            let dev = s.credentials(Some("dev")).unwrap();
            assert_eq!(dev.access_key_id, "DEV");
            assert_eq!(dev.session_token.unwrap().expose(), "devtoken");
            assert_eq!(s.credentials(Some("ops")).unwrap().access_key_id, "OPS");
            assert_eq!(s.region(Some("ops")).as_deref(), Some("ap-south-1"));
            let e = s.credentials(Some("missing")).unwrap_err();
            assert!(e.contains("profile `missing`"), "{e}");
        });
        with_env(
            &[("AWS_PROFILE", "dev"), ("AWS_REGION", "us-east-2")],
            Some(home.clone()),
            |s| {
                assert_eq!(s.credentials(None).unwrap().access_key_id, "DEV");
                assert_eq!(s.region(None).as_deref(), Some("us-east-2"));
            },
        );
        std::fs::remove_dir_all(home).unwrap();
    }

    #[test]
    fn nothing_found_names_the_places_and_no_secret() {
        let e = with_env(&[("AWS_SECRET_ACCESS_KEY", "hidden-value")], None, |s| {
            s.credentials(None)
        })
        .unwrap_err();
        assert!(e.contains("AWS_ACCESS_KEY_ID"), "{e}");
        assert!(!e.contains("hidden-value"), "{e}");
    }
}
