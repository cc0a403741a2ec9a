// Package transport is the gate's I/O with clients and origins: its HTTP/1.1 server, its pool of
// HTTP/1.1 connections to origins and the connections of its tunnels; it decides nothing.
package transport
