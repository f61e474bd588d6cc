//! ACLs (KIP-140): CreateAcls, DescribeAcls, DeleteAcls, with prefixed
//! resource patterns (KIP-290). The broker needs an authorizer
//! (`authorizer.class.name`); without one every call fails with
//! SECURITY_DISABLED, reported as a typed [`crate::Error::Kafka`].

use std::fmt;
use std::str::FromStr;

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};

use super::{check, str_bytes, Admin};
use crate::error::{Error, Result};
use crate::protocol::versions::Versions;

const ACL_VERSIONS: Versions = Versions::new(1, 3);

/// Defines a wire enum with Kafka's names (case-insensitive parsing,
/// `Display` in Kafka's upper-case form).
macro_rules! wire_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $code:literal, $text:literal;)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$vm])* $v,)*
        }

        impl $name {
            /// The wire code.
            pub fn code(self) -> i8 {
                match self { $($name::$v => $code,)* }
            }

            fn from_code(code: i8) -> Option<$name> {
                match code { $($code => Some($name::$v),)* _ => None }
            }

            fn from_wire(code: i8, what: &'static str) -> Result<$name> {
                $name::from_code(code).ok_or_else(|| Error::Protocol {
                    broker: crate::error::Origin::Cluster,
                    api: "ACLs".into(),
                    source: crate::protocol::ProtocolError::Invalid {
                        what,
                        reason: format!("unknown code {code}"),
                    },
                })
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self { $($name::$v => $text,)* })
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<$name> {
                let norm = s.replace(['-', '_'], "").to_ascii_uppercase();
                $(if norm == $text.replace('_', "") { return Ok($name::$v); })*
                Err(Error::config(stringify!($name), format!("unknown value {s:?}")))
            }
        }
    };
}

wire_enum!(
    /// The kind of resource an ACL protects.
    AclResourceType {
        /// Matches every type (filters only).
        Any = 1, "ANY";
        /// A topic.
        Topic = 2, "TOPIC";
        /// A group.
        Group = 3, "GROUP";
        /// The cluster.
        Cluster = 4, "CLUSTER";
        /// A transactional id.
        TransactionalId = 5, "TRANSACTIONAL_ID";
        /// A delegation token.
        DelegationToken = 6, "DELEGATION_TOKEN";
        /// A user.
        User = 7, "USER";
    }
);

wire_enum!(
    /// How an ACL's resource name matches.
    PatternType {
        /// Matches every pattern type (filters only).
        Any = 1, "ANY";
        /// Literal or prefixed patterns that match the name (filters only).
        Match = 2, "MATCH";
        /// The exact name (`*` for all).
        Literal = 3, "LITERAL";
        /// Every name starting with it.
        Prefixed = 4, "PREFIXED";
    }
);

wire_enum!(
    /// The operation an ACL allows or denies.
    AclOperation {
        /// Matches every operation (filters only).
        Any = 1, "ANY";
        /// All operations.
        All = 2, "ALL";
        /// Read.
        Read = 3, "READ";
        /// Write.
        Write = 4, "WRITE";
        /// Create.
        Create = 5, "CREATE";
        /// Delete.
        Delete = 6, "DELETE";
        /// Alter.
        Alter = 7, "ALTER";
        /// Describe.
        Describe = 8, "DESCRIBE";
        /// Cluster actions (inter-broker).
        ClusterAction = 9, "CLUSTER_ACTION";
        /// Describe configs.
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        /// Alter configs.
        AlterConfigs = 11, "ALTER_CONFIGS";
        /// Idempotent produce.
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
        /// Create delegation tokens.
        CreateTokens = 13, "CREATE_TOKENS";
        /// Describe delegation tokens.
        DescribeTokens = 14, "DESCRIBE_TOKENS";
        /// Two-phase commit (KIP-939).
        TwoPhaseCommit = 15, "TWO_PHASE_COMMIT";
    }
);

wire_enum!(
    /// Allow or deny.
    AclPermission {
        /// Matches both (filters only).
        Any = 1, "ANY";
        /// Deny.
        Deny = 2, "DENY";
        /// Allow.
        Allow = 3, "ALLOW";
    }
);

/// One ACL: a principal may (or may not) do an operation on resources.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AclBinding {
    /// Resource type.
    pub resource_type: AclResourceType,
    /// Resource name (`kafka-cluster` for the cluster, `*` for all).
    pub resource_name: String,
    /// How the name matches.
    pub pattern_type: PatternType,
    /// Principal, e.g. `User:alice`.
    pub principal: String,
    /// Host (`*` for any).
    pub host: String,
    /// Operation.
    pub operation: AclOperation,
    /// Allow or deny.
    pub permission: AclPermission,
}

impl fmt::Display for AclBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} on {}:{}:{} from host {}",
            self.principal,
            self.permission,
            self.operation,
            self.resource_type,
            self.pattern_type,
            self.resource_name,
            self.host
        )
    }
}

/// Selects ACLs: `None` fields match anything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AclFilter {
    /// Resource type (`None`: any).
    pub resource_type: Option<AclResourceType>,
    /// Resource name (`None`: any).
    pub resource_name: Option<String>,
    /// Pattern type (`None`: any).
    pub pattern_type: Option<PatternType>,
    /// Principal (`None`: any).
    pub principal: Option<String>,
    /// Host (`None`: any).
    pub host: Option<String>,
    /// Operation (`None`: any).
    pub operation: Option<AclOperation>,
    /// Permission (`None`: any).
    pub permission: Option<AclPermission>,
}

impl AclFilter {
    /// A filter matching every ACL.
    pub fn any() -> AclFilter {
        AclFilter::default()
    }
}

impl Admin {
    /// Creates ACLs, one result per binding (in order).
    pub async fn create_acls(&self, acls: &[AclBinding]) -> Result<Vec<(AclBinding, Result<()>)>> {
        let req = CreateAclsRequest::default().with_creations(
            acls.iter()
                .map(|a| {
                    AclCreation::default()
                        .with_resource_type(a.resource_type.code())
                        .with_resource_name(str_bytes(&a.resource_name))
                        .with_resource_pattern_type(a.pattern_type.code())
                        .with_principal(str_bytes(&a.principal))
                        .with_host(str_bytes(&a.host))
                        .with_operation(a.operation.code())
                        .with_permission_type(a.permission.code())
                })
                .collect(),
        );
        let resp = self.send_controller(&req, ACL_VERSIONS).await?;
        Ok(acls
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let r = match resp.results.get(i) {
                    None => Err(super::missing("CreateAcls", &a.to_string())),
                    Some(x) => check(
                        x.error_code,
                        x.error_message.as_ref(),
                        "CreateAcls",
                        &format!("ACL {a}"),
                    ),
                };
                (a.clone(), r)
            })
            .collect())
    }

    /// The ACLs matching `filter`.
    pub async fn describe_acls(&self, filter: &AclFilter) -> Result<Vec<AclBinding>> {
        let req = DescribeAclsRequest::default()
            .with_resource_type_filter(filter.resource_type.map_or(1, |x| x.code()))
            .with_resource_name_filter(filter.resource_name.as_deref().map(str_bytes))
            .with_pattern_type_filter(filter.pattern_type.map_or(1, |x| x.code()))
            .with_principal_filter(filter.principal.as_deref().map(str_bytes))
            .with_host_filter(filter.host.as_deref().map(str_bytes))
            .with_operation(filter.operation.map_or(1, |x| x.code()))
            .with_permission_type(filter.permission.map_or(1, |x| x.code()));
        let resp = self.send_controller(&req, ACL_VERSIONS).await?;
        check(
            resp.error_code,
            resp.error_message.as_ref(),
            "DescribeAcls",
            "ACLs",
        )?;
        let mut out = Vec::new();
        for r in &resp.resources {
            for a in &r.acls {
                out.push(AclBinding {
                    resource_type: AclResourceType::from_wire(r.resource_type, "resource type")?,
                    resource_name: r.resource_name.as_str().to_owned(),
                    pattern_type: PatternType::from_wire(r.pattern_type, "pattern type")?,
                    principal: a.principal.as_str().to_owned(),
                    host: a.host.as_str().to_owned(),
                    operation: AclOperation::from_wire(a.operation, "operation")?,
                    permission: AclPermission::from_wire(a.permission_type, "permission")?,
                });
            }
        }
        Ok(out)
    }

    /// Deletes the ACLs matching each filter; one result per filter: the
    /// deleted bindings.
    pub async fn delete_acls(&self, filters: &[AclFilter]) -> Result<Vec<Result<Vec<AclBinding>>>> {
        let req = DeleteAclsRequest::default().with_filters(
            filters
                .iter()
                .map(|f| {
                    DeleteAclsFilter::default()
                        .with_resource_type_filter(f.resource_type.map_or(1, |x| x.code()))
                        .with_resource_name_filter(f.resource_name.as_deref().map(str_bytes))
                        .with_pattern_type_filter(f.pattern_type.map_or(1, |x| x.code()))
                        .with_principal_filter(f.principal.as_deref().map(str_bytes))
                        .with_host_filter(f.host.as_deref().map(str_bytes))
                        .with_operation(f.operation.map_or(1, |x| x.code()))
                        .with_permission_type(f.permission.map_or(1, |x| x.code()))
                })
                .collect(),
        );
        let resp = self.send_controller(&req, ACL_VERSIONS).await?;
        Ok((0..filters.len())
            .map(|i| {
                let fr = resp
                    .filter_results
                    .get(i)
                    .ok_or_else(|| super::missing("DeleteAcls", &format!("filter {i}")))?;
                check(
                    fr.error_code,
                    fr.error_message.as_ref(),
                    "DeleteAcls",
                    &format!("filter {i}"),
                )?;
                fr.matching_acls
                    .iter()
                    .map(|m| {
                        Ok(AclBinding {
                            resource_type: AclResourceType::from_wire(
                                m.resource_type,
                                "resource type",
                            )?,
                            resource_name: m.resource_name.as_str().to_owned(),
                            pattern_type: PatternType::from_wire(m.pattern_type, "pattern type")?,
                            principal: m.principal.as_str().to_owned(),
                            host: m.host.as_str().to_owned(),
                            operation: AclOperation::from_wire(m.operation, "operation")?,
                            permission: AclPermission::from_wire(m.permission_type, "permission")?,
                        })
                    })
                    .collect()
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acl_names_parse_like_kafka_tools() {
        assert_eq!(
            "topic".parse::<AclResourceType>().unwrap(),
            AclResourceType::Topic
        );
        assert_eq!(
            "transactional-id".parse::<AclResourceType>().unwrap(),
            AclResourceType::TransactionalId
        );
        assert_eq!(
            "DescribeConfigs".parse::<AclOperation>().unwrap(),
            AclOperation::DescribeConfigs
        );
        assert_eq!(
            "prefixed".parse::<PatternType>().unwrap(),
            PatternType::Prefixed
        );
        assert_eq!(AclPermission::Allow.to_string(), "ALLOW");
        assert_eq!(AclOperation::ClusterAction.code(), 9);
        assert!("nope".parse::<AclOperation>().is_err());
    }
}
