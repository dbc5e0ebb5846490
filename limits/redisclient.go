package limits

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The counters can live on one Redis server (ParseRedisURL), in a Redis Cluster
// (ParseRedisClusterURLs) or on a primary watched by Sentinel (ParseRedisSentinelURLs).
// Each gets the same fail-fast options, so a Redis that stops answering costs a request
// about half a second whatever its kind. The errors never hold a URL: one may carry a
// password.

// ParseRedisClusterURLs reads the redis:// or rediss:// URLs of some of a Redis Cluster's
// nodes (one is enough: the client learns the others from it; more help when one is
// down) into cluster client options that fail fast as ParseRedisURL's do. The URLs
// share one scheme and one user and password (a managed cluster's, such as ElastiCache,
// Memorystore or Azure Cache: rediss:// for TLS), and name database 0, the only one a
// Cluster has.
func ParseRedisClusterURLs(urls []string) (*redis.ClusterOptions, error) {
	first, addrs, err := parseSameURLs(urls)
	if err != nil {
		return nil, err
	}
	if first.DB != 0 {
		return nil, errors.New("a Redis Cluster has only database 0")
	}
	return &redis.ClusterOptions{
		Addrs:    addrs,
		Username: first.Username, Password: first.Password, TLSConfig: first.TLSConfig,
		DialTimeout: first.DialTimeout, ReadTimeout: first.ReadTimeout, WriteTimeout: first.WriteTimeout,
		ContextTimeoutEnabled: first.ContextTimeoutEnabled,
		MaxRetries:            first.MaxRetries, DialerRetries: first.DialerRetries,
		PoolTimeout: first.PoolTimeout,
	}, nil
}

// ParseRedisSentinelURLs reads a Sentinel master name and the redis:// or rediss:// URLs
// of its Sentinels into failover client options that fail fast as ParseRedisURL's do.
// The user, password and database in the URLs are the master's (and its replicas'):
// the Sentinels themselves are asked without a password. The URLs share one scheme, user,
// password and database.
func ParseRedisSentinelURLs(master string, urls []string) (*redis.FailoverOptions, error) {
	if master == "" {
		return nil, errors.New("no master name")
	}
	first, addrs, err := parseSameURLs(urls)
	if err != nil {
		return nil, err
	}
	return &redis.FailoverOptions{
		MasterName: master, SentinelAddrs: addrs,
		Username: first.Username, Password: first.Password, DB: first.DB, TLSConfig: first.TLSConfig,
		DialTimeout: first.DialTimeout, ReadTimeout: first.ReadTimeout, WriteTimeout: first.WriteTimeout,
		ContextTimeoutEnabled: first.ContextTimeoutEnabled,
		MaxRetries:            first.MaxRetries, DialerRetries: first.DialerRetries,
		PoolTimeout: first.PoolTimeout,
	}, nil
}

// parseSameURLs reads urls with ParseRedisURL: the first one's options, and every URL's
// address. The URLs must agree on all but the address.
func parseSameURLs(urls []string) (*redis.Options, []string, error) {
	if len(urls) == 0 {
		return nil, nil, errors.New("no URL")
	}
	var first *redis.Options
	addrs := make([]string, 0, len(urls))
	for i, u := range urls {
		o, err := ParseRedisURL(u)
		if err != nil {
			return nil, nil, fmt.Errorf("URL %d of %d is not a redis:// or rediss:// URL", i+1, len(urls))
		}
		if first == nil {
			first = o
		} else if o.Username != first.Username || o.Password != first.Password || o.DB != first.DB ||
			(o.TLSConfig == nil) != (first.TLSConfig == nil) {
			return nil, nil, fmt.Errorf("URL %d of %d differs from the first in its scheme, user, password or database: they must agree", i+1, len(urls))
		}
		addrs = append(addrs, o.Addr)
	}
	return first, addrs, nil
}
