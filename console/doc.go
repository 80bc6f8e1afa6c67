// Package console is Cairn's web console: a browser front end served by
// every gateway (`--console ADDR`) for browsing, uploading and sharing
// files, managing keys and watching the cluster and its traffic.
//
// The pages are static assets embedded in the binary (plain HTML, CSS and
// JavaScript modules; nothing is fetched from elsewhere at run time). The
// Go side keeps sessions and forwards every file operation, with the
// signed-in user's key and secret, to the native HTTP API handler (and
// large uploads and share links to the S3 handler, signed with SigV4), so
// the console can do nothing the user's credentials cannot. Admin pages
// call meta's admin RPCs for root sessions only.
//
// Sessions live in memory: a random id in an HttpOnly, SameSite=Strict
// cookie names the user's key and secret on the server; every
// state-changing request must also carry the session's CSRF token in the
// X-CSRF-Token header. Sessions end at sign-out or after Config.SessionTTL,
// and do not survive a restart of the process.
package console
