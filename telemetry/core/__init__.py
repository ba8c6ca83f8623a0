"""The KIP-714 rules every door shares: subscriptions, client instances, the manager, codecs."""
