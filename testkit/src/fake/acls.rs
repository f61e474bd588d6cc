//! ACLs (KIP-140): CreateAcls, DescribeAcls and DeleteAcls store and match
//! bindings as Kafka's `StandardAuthorizer` does, including the MATCH
//! pattern filter (literal, wildcard `*` and prefixed bindings that apply to
//! a name). With an authorizer (`FakeClusterBuilder::authorizer`) requests
//! are checked against them (`authz.rs`).

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::errors::Code;
use super::state::ClusterState;

/// `ResourceType` ANY, `PatternType` ANY / MATCH / LITERAL / PREFIXED,
/// `AclOperation` ANY, `AclPermissionType` ANY (Kafka's wire values).
const ANY: i8 = 1;
const MATCH: i8 = 2;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;

/// One stored ACL binding.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AclEntry {
    /// Resource type (2 topic, 3 group, 4 cluster, 5 transactional id, ...).
    pub resource_type: i8,
    /// Resource name (or prefix, for PREFIXED).
    pub resource_name: String,
    /// 3 LITERAL or 4 PREFIXED.
    pub pattern_type: i8,
    /// `User:name`.
    pub principal: String,
    /// Host, `*` for any.
    pub host: String,
    /// Operation (2 ALL, 3 READ, 4 WRITE, ...).
    pub operation: i8,
    /// 2 DENY or 3 ALLOW.
    pub permission: i8,
}

/// A DescribeAcls or DeleteAcls filter, decoded once.
struct Filter<'a> {
    resource_type: i8,
    name: Option<&'a str>,
    pattern_type: i8,
    principal: Option<&'a str>,
    host: Option<&'a str>,
    operation: i8,
    permission: i8,
}

impl Filter<'_> {
    /// Why the filter is refused (`INVALID_REQUEST`), if it is.
    fn invalid(&self) -> Option<String> {
        let bad = |v: i8, max: i8| v < ANY || v > max;
        if bad(self.resource_type, 7)
            || bad(self.pattern_type, PREFIXED)
            || bad(self.operation, 14)
            || bad(self.permission, 3)
        {
            return Some(
                "the filter has an unknown resource, pattern, operation or permission".into(),
            );
        }
        None
    }

    fn matches(&self, e: &AclEntry) -> bool {
        let any_or = |f: i8, v: i8| f == ANY || f == v;
        let name_ok = match (self.pattern_type, self.name) {
            (MATCH, Some(n)) => match e.pattern_type {
                LITERAL => e.resource_name == n || e.resource_name == "*",
                PREFIXED => n.starts_with(e.resource_name.as_str()),
                _ => false,
            },
            (MATCH | ANY, None) => true,
            (ANY, Some(n)) => e.resource_name == n,
            (p, n) => p == e.pattern_type && n.is_none_or(|n| e.resource_name == n),
        };
        any_or(self.resource_type, e.resource_type)
            && name_ok
            && self.principal.is_none_or(|p| p == e.principal)
            && self.host.is_none_or(|h| h == e.host)
            && any_or(self.operation, e.operation)
            && any_or(self.permission, e.permission)
    }
}

/// Why a new binding is refused (`INVALID_REQUEST`), if it is.
fn invalid_binding(e: &AclEntry) -> Option<String> {
    if !(2..=7).contains(&e.resource_type) {
        return Some(format!("invalid resource type {}", e.resource_type));
    }
    if e.pattern_type != LITERAL && e.pattern_type != PREFIXED {
        return Some(format!("invalid pattern type {}", e.pattern_type));
    }
    if !(2..=14).contains(&e.operation) {
        return Some(format!("invalid operation {}", e.operation));
    }
    if !(2..=3).contains(&e.permission) {
        return Some(format!("invalid permission type {}", e.permission));
    }
    if e.principal
        .split_once(':')
        .is_none_or(|(t, n)| t.is_empty() || n.is_empty())
    {
        return Some(format!(
            "invalid principal {:?}: expected Type:name",
            e.principal
        ));
    }
    if e.resource_name.is_empty() {
        return Some("empty resource name".into());
    }
    None
}

fn text(s: &Option<StrBytes>) -> Option<&str> {
    s.as_ref().map(|s| s.as_str())
}

impl ClusterState {
    pub(super) fn create_acls(&mut self, req: CreateAclsRequest) -> CreateAclsResponse {
        let results = req
            .creations
            .into_iter()
            .map(|c| {
                let entry = AclEntry {
                    resource_type: c.resource_type,
                    resource_name: c.resource_name.to_string(),
                    pattern_type: c.resource_pattern_type,
                    principal: c.principal.to_string(),
                    host: c.host.to_string(),
                    operation: c.operation,
                    permission: c.permission_type,
                };
                match invalid_binding(&entry) {
                    Some(why) => AclCreationResult::default()
                        .with_error_code(Code::InvalidRequest.value())
                        .with_error_message(Some(StrBytes::from_string(why))),
                    None => {
                        if !self.acls.contains(&entry) {
                            self.acls.push(entry);
                        }
                        AclCreationResult::default()
                    }
                }
            })
            .collect();
        CreateAclsResponse::default().with_results(results)
    }

    pub(super) fn describe_acls(&self, req: DescribeAclsRequest) -> DescribeAclsResponse {
        let filter = Filter {
            resource_type: req.resource_type_filter,
            name: text(&req.resource_name_filter),
            pattern_type: req.pattern_type_filter,
            principal: text(&req.principal_filter),
            host: text(&req.host_filter),
            operation: req.operation,
            permission: req.permission_type,
        };
        if let Some(why) = filter.invalid() {
            return DescribeAclsResponse::default()
                .with_error_code(Code::InvalidRequest.value())
                .with_error_message(Some(StrBytes::from_string(why)));
        }
        let mut resources: Vec<DescribeAclsResource> = Vec::new();
        let mut matched: Vec<&AclEntry> = self.acls.iter().filter(|e| filter.matches(e)).collect();
        matched.sort();
        for e in matched {
            let acl = AclDescription::default()
                .with_principal(StrBytes::from_string(e.principal.clone()))
                .with_host(StrBytes::from_string(e.host.clone()))
                .with_operation(e.operation)
                .with_permission_type(e.permission);
            match resources.iter_mut().find(|r| {
                r.resource_type == e.resource_type
                    && r.pattern_type == e.pattern_type
                    && r.resource_name.as_str() == e.resource_name
            }) {
                Some(r) => r.acls.push(acl),
                None => resources.push(
                    DescribeAclsResource::default()
                        .with_resource_type(e.resource_type)
                        .with_resource_name(StrBytes::from_string(e.resource_name.clone()))
                        .with_pattern_type(e.pattern_type)
                        .with_acls(vec![acl]),
                ),
            }
        }
        DescribeAclsResponse::default().with_resources(resources)
    }

    pub(super) fn delete_acls(&mut self, req: DeleteAclsRequest) -> DeleteAclsResponse {
        let results = req
            .filters
            .iter()
            .map(|f| {
                let filter = Filter {
                    resource_type: f.resource_type_filter,
                    name: text(&f.resource_name_filter),
                    pattern_type: f.pattern_type_filter,
                    principal: text(&f.principal_filter),
                    host: text(&f.host_filter),
                    operation: f.operation,
                    permission: f.permission_type,
                };
                if let Some(why) = filter.invalid() {
                    return DeleteAclsFilterResult::default()
                        .with_error_code(Code::InvalidRequest.value())
                        .with_error_message(Some(StrBytes::from_string(why)));
                }
                let (gone, kept) = std::mem::take(&mut self.acls)
                    .into_iter()
                    .partition(|e| filter.matches(e));
                self.acls = kept;
                let gone: Vec<AclEntry> = gone;
                let matching = gone
                    .into_iter()
                    .map(|e| {
                        DeleteAclsMatchingAcl::default()
                            .with_resource_type(e.resource_type)
                            .with_resource_name(StrBytes::from_string(e.resource_name))
                            .with_pattern_type(e.pattern_type)
                            .with_principal(StrBytes::from_string(e.principal))
                            .with_host(StrBytes::from_string(e.host))
                            .with_operation(e.operation)
                            .with_permission_type(e.permission)
                    })
                    .collect();
                DeleteAclsFilterResult::default().with_matching_acls(matching)
            })
            .collect();
        DeleteAclsResponse::default().with_filter_results(results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, pattern: i8, op: i8) -> AclEntry {
        AclEntry {
            resource_type: 2,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: op,
            permission: 3,
        }
    }

    fn filter(name: Option<&str>, pattern: i8) -> Filter<'_> {
        Filter {
            resource_type: ANY,
            name,
            pattern_type: pattern,
            principal: None,
            host: None,
            operation: ANY,
            permission: ANY,
        }
    }

    #[test]
    fn match_filters_find_literal_wildcard_and_prefixed_bindings() {
        let lit = entry("orders", LITERAL, 3);
        let star = entry("*", LITERAL, 3);
        let pre = entry("ord", PREFIXED, 4);
        let other = entry("payments", LITERAL, 3);
        let m = filter(Some("orders"), MATCH);
        assert!(m.matches(&lit) && m.matches(&star) && m.matches(&pre));
        assert!(!m.matches(&other));
        let l = filter(Some("orders"), LITERAL);
        assert!(l.matches(&lit) && !l.matches(&star) && !l.matches(&pre));
        let p = filter(Some("ord"), PREFIXED);
        assert!(p.matches(&pre) && !p.matches(&lit));
        assert!(filter(None, ANY).matches(&other));
        let mut read_only = filter(None, ANY);
        read_only.operation = 3;
        assert!(read_only.matches(&lit) && !read_only.matches(&pre));
        assert!(filter(None, 0).invalid().is_some());
    }

    #[test]
    fn bindings_are_validated() {
        assert!(invalid_binding(&entry("t", LITERAL, 3)).is_none());
        assert!(invalid_binding(&entry("t", MATCH, 3)).is_some());
        assert!(invalid_binding(&entry("t", LITERAL, ANY)).is_some());
        let mut e = entry("t", LITERAL, 3);
        e.principal = "alice".into();
        assert!(invalid_binding(&e).is_some());
    }
}
