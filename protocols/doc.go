// Package protocols knows the two protocol families the gateway serves in their native
// shapes: which operation a request is, what a valid request looks like, where `model`
// and usage sit in each response shape, and what each family's error envelope is.
// It is pure logic over bytes and headers; nothing here knows about Caddy or routing.
package protocols
