// Package policy parses and evaluates S3 bucket policies: the common
// subset of AWS's policy language that Cairn enforces, and nothing more.
//
// A policy is JSON: a Version ("2012-10-17" or "2008-10-17"), an optional
// Id and one or more Statements, each with an optional Sid, an Effect
// (Allow or Deny), a Principal, an Action, a Resource and an optional
// Condition. Every other element (NotPrincipal, NotAction, NotResource,
// policy variables, other condition operators and keys, other principal
// types) is refused by Parse with an error that says which one: a
// policy is never enforced with a part of it ignored.
//
// Principals. "*" (or {"AWS": "*"}) is everyone, anonymous callers
// included. A Cairn user is named by its user name or its access key id,
// bare ("alice", "AKIA...") or as an IAM user ARN with any account
// ("arn:aws:iam::123456789012:user/alice", "arn:aws:iam:::user/alice").
//
// Actions are s3:<name> for the operations in Actions, with * and ?
// wildcards ("s3:*", "s3:Get*"); a wildcard must match one of them.
// Resources are arn:aws:s3:::<the policy's bucket> (bucket actions) and
// arn:aws:s3:::<bucket>/<key pattern> (object actions), with * and ?.
//
// Conditions: aws:SourceIp with IpAddress / NotIpAddress (addresses and
// CIDR blocks), aws:SecureTransport with Bool, s3:prefix and aws:Referer
// with StringEquals / StringNotEquals / StringLike / StringNotLike; each
// operator also in its ...IfExists form. All conditions of a statement
// must hold (several values of one key: any); a key the request does not
// carry makes a positive operator false, a negated one true and an
// ...IfExists one true, as in AWS. A public Allow limited by
// IpAddressIfExists still counts as public (Public).
//
// Evaluation: a matching Deny wins over everything; else a matching
// Allow allows; else the policy has no opinion and the caller's other
// rights (owner, grants, ACL) decide.
package policy
