package purekafka.registry;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import java.util.List;
import javax.enterprise.context.ApplicationScoped;
import javax.enterprise.inject.Produces;

/**
 * Stands in for the build step of apicurio-common-app-components-config-index
 * (not served by the Maven registry): the registry runs with no properties
 * that can be changed at run time.
 */
@ApplicationScoped
public class NoDynamicConfig {
    @Produces
    @ApplicationScoped
    DynamicConfigPropertyList dynamicConfigProperties() {
        return new DynamicConfigPropertyList(List.of());
    }
}
