//! `purekafka acls create|list|delete`, as `kafka-acls.sh`. The broker
//! needs an authorizer; without one the broker's SECURITY_DISABLED error is
//! the one-line reason.

use clap::{Args, Subcommand};
use purekafka::admin::{
    AclBinding, AclFilter, AclOperation, AclPermission, AclResourceType, PatternType,
};
use purekafka::{Admin, Error};
use serde_json::json;

use crate::output::{print_json, Failures, Format, Table};
use crate::Connect;

/// Which ACLs (for list/delete; every field optional).
#[derive(Args, Debug, Clone)]
pub struct FilterArgs {
    /// topic, group, cluster, transactional-id, delegation-token, user.
    #[arg(long)]
    resource_type: Option<String>,
    /// Resource name.
    #[arg(long)]
    resource_name: Option<String>,
    /// literal, prefixed, match, any.
    #[arg(long)]
    pattern: Option<String>,
    /// Principal, e.g. User:alice.
    #[arg(long)]
    principal: Option<String>,
    /// Host.
    #[arg(long)]
    host: Option<String>,
    /// Operation: read, write, describe, all, ...
    #[arg(long)]
    operation: Option<String>,
    /// allow or deny.
    #[arg(long)]
    permission: Option<String>,
}

fn parse<T: std::str::FromStr<Err = Error>>(v: &Option<String>) -> purekafka::Result<Option<T>> {
    v.as_deref().map(str::parse).transpose()
}

impl FilterArgs {
    fn filter(&self) -> purekafka::Result<AclFilter> {
        Ok(AclFilter {
            resource_type: parse(&self.resource_type)?,
            resource_name: self.resource_name.clone(),
            pattern_type: parse(&self.pattern)?,
            principal: self.principal.clone(),
            host: self.host.clone(),
            operation: parse(&self.operation)?,
            permission: parse(&self.permission)?,
        })
    }

    fn binding(&self) -> purekafka::Result<AclBinding> {
        let need = |v: &Option<String>, flag: &str| {
            v.clone()
                .ok_or_else(|| Error::config(flag, "required to create an ACL"))
        };
        Ok(AclBinding {
            resource_type: need(&self.resource_type, "--resource-type")?
                .parse::<AclResourceType>()?,
            resource_name: need(&self.resource_name, "--resource-name")?,
            pattern_type: parse(&self.pattern)?.unwrap_or(PatternType::Literal),
            principal: need(&self.principal, "--principal")?,
            host: self.host.clone().unwrap_or_else(|| "*".into()),
            operation: need(&self.operation, "--operation")?.parse::<AclOperation>()?,
            permission: parse(&self.permission)?.unwrap_or(AclPermission::Allow),
        })
    }
}

/// ACL commands.
#[derive(Subcommand, Debug)]
pub enum AclsCommand {
    /// Create one ACL (pattern defaults to literal, host to *, permission
    /// to allow).
    Create {
        #[command(flatten)]
        connect: Connect,
        #[command(flatten)]
        acl: FilterArgs,
    },
    /// List ACLs matching the filter.
    List {
        #[command(flatten)]
        connect: Connect,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        format: Format,
    },
    /// Delete ACLs matching the filter.
    Delete {
        #[command(flatten)]
        connect: Connect,
        #[command(flatten)]
        filter: FilterArgs,
    },
}

fn print_acls(acls: &[AclBinding], json_out: bool) {
    if json_out {
        print_json(&json!(acls
            .iter()
            .map(|a| json!({
                "resource_type": a.resource_type.to_string(),
                "resource_name": a.resource_name,
                "pattern_type": a.pattern_type.to_string(),
                "principal": a.principal,
                "host": a.host,
                "operation": a.operation.to_string(),
                "permission": a.permission.to_string(),
            }))
            .collect::<Vec<_>>()));
        return;
    }
    let mut t = Table::new(&[
        "RESOURCE-TYPE",
        "NAME",
        "PATTERN",
        "PRINCIPAL",
        "HOST",
        "OPERATION",
        "PERMISSION",
    ]);
    for a in acls {
        t.row(vec![
            a.resource_type.to_string(),
            a.resource_name.clone(),
            a.pattern_type.to_string(),
            a.principal.clone(),
            a.host.clone(),
            a.operation.to_string(),
            a.permission.to_string(),
        ]);
    }
    t.print();
}

/// Runs an acls command.
pub async fn run(cmd: AclsCommand) -> purekafka::Result<()> {
    match cmd {
        AclsCommand::Create { connect, acl } => {
            let binding = acl.binding()?;
            let admin = Admin::connect(connect.client()?).await?;
            let mut failures = Failures::default();
            for (b, r) in admin.create_acls(&[binding]).await? {
                if failures.take(r).is_some() {
                    println!("created ACL: {b}");
                }
            }
            failures.finish()
        }
        AclsCommand::List {
            connect,
            filter,
            format,
        } => {
            let f = filter.filter()?;
            let admin = Admin::connect(connect.client()?).await?;
            print_acls(&admin.describe_acls(&f).await?, format.json);
            Ok(())
        }
        AclsCommand::Delete { connect, filter } => {
            let f = filter.filter()?;
            let admin = Admin::connect(connect.client()?).await?;
            let mut failures = Failures::default();
            for r in admin.delete_acls(&[f]).await? {
                if let Some(deleted) = failures.take(r) {
                    for b in deleted {
                        println!("deleted ACL: {b}");
                    }
                }
            }
            failures.finish()
        }
    }
}
