// Package pki is Cairn's cluster identity: the cluster CA that meta
// creates at its first start, the certificates it issues to meta, data
// servers and gateways (mutual TLS between roles), and the join tokens a
// new server trades for its certificate.
//
// A certificate names its holder's role in Subject.OrganizationalUnit[0]
// (RoleMeta, RoleData, RoleGateway) and its id in Subject.CommonName.
// Users hold no certificates: they authenticate each call with an access
// key and secret over a TLS connection that verified the server.
package pki
