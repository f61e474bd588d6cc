//! Sign-in to managed clusters: OIDC client credentials (feature `oauth`,
//! KIP-768) and Amazon MSK IAM (feature `aws-msk-iam`). The README's
//! "Managed clusters" snippets, compiled.
//!
//! ```text
//! cargo run --example managed_sign_in --features oauth,aws-msk-iam -- oidc BOOTSTRAP TOKEN_URL ID SECRET
//! cargo run --example managed_sign_in --features oauth,aws-msk-iam -- msk BOOTSTRAP REGION
//! ```

use std::sync::Arc;

use purekafka::{ClientConfig, Cluster, MskIamTokenProvider, SaslMechanism, SecurityProtocol};

/// OIDC client credentials with the Java client's property names.
fn oidc(
    bootstrap: &str,
    token_url: &str,
    id: &str,
    secret: &str,
) -> purekafka::Result<ClientConfig> {
    ClientConfig::from_properties([
        ("bootstrap.servers", bootstrap),
        ("security.protocol", "SASL_SSL"),
        ("sasl.mechanism", "OAUTHBEARER"),
        ("sasl.oauthbearer.token.endpoint.url", token_url),
        ("sasl.oauthbearer.client.credentials.client.id", id),
        ("sasl.oauthbearer.client.credentials.client.secret", secret),
        ("sasl.oauthbearer.scope", "kafka"),
        // Confluent Cloud names the cluster and identity pool as SASL extensions.
        (
            "sasl.jaas.config",
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \
             extension_logicalCluster=\"lkc-abc123\" extension_identityPoolId=\"pool-XyZ\";",
        ),
    ])
}

/// Amazon MSK IAM: credentials from the environment or ~/.aws (AWS_PROFILE).
fn msk(bootstrap: &str, region: &str) -> purekafka::Result<ClientConfig> {
    ClientConfig::builder()
        .bootstrap_servers(bootstrap)
        .security_protocol(SecurityProtocol::SaslSsl)
        .sasl_mechanism(SaslMechanism::OAuthBearer)
        .sasl_token_provider(Arc::new(MskIamTokenProvider::new(region)?))
        .build()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> purekafka::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["oidc", bootstrap, url, id, secret] => oidc(bootstrap, url, id, secret)?,
        ["msk", bootstrap, region] => msk(bootstrap, region)?,
        _ => {
            eprintln!(
                "usage: managed_sign_in oidc BOOTSTRAP TOKEN_URL ID SECRET | msk BOOTSTRAP REGION"
            );
            std::process::exit(2);
        }
    };
    let cluster = Cluster::connect(config).await?;
    for b in cluster.metadata().brokers.values() {
        println!("broker {} at {}:{}", b.id, b.host, b.port);
    }
    Ok(())
}
