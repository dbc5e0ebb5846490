package limits

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every kind of client fails fast as one server's does, with the credentials and TLS of
// its URLs, and a bad URL is named by its place, never echoed (it may hold a password).
func TestRedisClientOptionsForEveryKind(t *testing.T) {
	one, err := ParseRedisURL("rediss://gw:s3cret@node-1.example:6380/0")
	require.NoError(t, err)
	urls := []string{"rediss://gw:s3cret@node-1.example:6380", "rediss://gw:s3cret@node-2.example:6380/0"}

	co, err := ParseRedisClusterURLs(urls)
	require.NoError(t, err)
	require.Equal(t, []string{"node-1.example:6380", "node-2.example:6380"}, co.Addrs)
	require.Equal(t, "gw", co.Username)
	require.Equal(t, "s3cret", co.Password)
	require.NotNil(t, co.TLSConfig, "rediss:// is TLS")
	require.Equal(t, one.ReadTimeout, co.ReadTimeout)
	require.Equal(t, 500*time.Millisecond, co.DialTimeout)
	require.Equal(t, 500*time.Millisecond, co.WriteTimeout)
	require.True(t, co.ContextTimeoutEnabled)
	require.Equal(t, 1, co.MaxRetries)
	require.Equal(t, 1, co.DialerRetries)
	require.Equal(t, time.Second, co.PoolTimeout)

	fo, err := ParseRedisSentinelURLs("main", []string{"redis://:pw@s1.example:26379/2", "redis://:pw@s2.example:26379/2"})
	require.NoError(t, err)
	require.Equal(t, "main", fo.MasterName)
	require.Equal(t, []string{"s1.example:26379", "s2.example:26379"}, fo.SentinelAddrs)
	require.Equal(t, "pw", fo.Password, "the master's password")
	require.Empty(t, fo.SentinelPassword, "the Sentinels are asked without one")
	require.Equal(t, 2, fo.DB)
	require.Nil(t, fo.TLSConfig)
	require.Equal(t, 500*time.Millisecond, fo.ReadTimeout)
	require.Equal(t, 500*time.Millisecond, fo.DialTimeout)
	require.Equal(t, 500*time.Millisecond, fo.WriteTimeout)
	require.True(t, fo.ContextTimeoutEnabled)
	require.Equal(t, 1, fo.MaxRetries)
	require.Equal(t, time.Second, fo.PoolTimeout)

	for _, bad := range []struct {
		name string
		err  error
	}{
		{"not a URL", func() error { _, err := ParseRedisClusterURLs([]string{urls[0], "http://gw:s3cret@x"}); return err }()},
		{"credentials differ", func() error {
			_, err := ParseRedisClusterURLs([]string{urls[0], "rediss://gw:other@node-2.example:6380"})
			return err
		}()},
		{"TLS differs", func() error {
			_, err := ParseRedisClusterURLs([]string{urls[0], "redis://gw:s3cret@n2:6380"})
			return err
		}()},
		{"cluster database", func() error { _, err := ParseRedisClusterURLs([]string{"redis://gw:s3cret@n1:6379/3"}); return err }()},
		{"no URL", func() error { _, err := ParseRedisClusterURLs(nil); return err }()},
		{"no master", func() error { _, err := ParseRedisSentinelURLs("", urls); return err }()},
	} {
		require.Error(t, bad.err, bad.name)
		require.NotContains(t, bad.err.Error(), "s3cret", bad.name)
	}
}
