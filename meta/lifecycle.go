package meta

import (
	"context"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/proto/metapb"
)

// S3 lifecycle: the rules of each bucket's configuration (S3BucketConfig
// .lifecycle, put by the S3 gateway) run here, on the leader only (a
// follower's pass would race the leader's), every LifecycleInterval of
// LifecycleClock. Each action is an ordinary command through the same
// calls the gateway makes, as meta's own process: object lock and legal
// holds refuse them in apply as they refuse a user's delete, and a
// refused action is skipped. Actions are limited to LifecycleRate per
// second so a rule that matches millions of keys does not crowd out
// the users' commands.

type lifecycleState struct {
	mu   sync.Mutex
	last time.Time // by LifecycleClock, when the last completed pass began; zero: none yet
	done int       // actions taken, all passes
}

// LifecyclePassed returns the time (by LifecycleClock) at which the last
// completed lifecycle pass began, and the actions all passes took.
func (s *Service) LifecyclePassed() (time.Time, int) {
	s.lc.mu.Lock()
	defer s.lc.mu.Unlock()
	return s.lc.last, s.lc.done
}

func (s *Service) lifecycleStart() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.background(nil, func(ctx context.Context) bool {
			now := s.cfg.LifecycleClock()
			if last, _ := s.LifecyclePassed(); !last.IsZero() && now.Sub(last) < s.cfg.LifecycleInterval {
				return false
			}
			n, err := s.lifecyclePass(ctx, now)
			s.lc.mu.Lock()
			s.lc.last = now
			s.lc.done += n
			s.lc.mu.Unlock()
			if err != nil && ctx.Err() == nil {
				s.log.Warn("s3 lifecycle pass failed; retried at the next", "err", err, "actions", n)
			} else if n > 0 {
				s.log.Info("s3 lifecycle pass", "actions", n)
			}
			return false
		})
	}()
}

// lifecyclePass runs every bucket's rules once, as of now, and returns
// the number of actions taken.
func (s *Service) lifecyclePass(ctx context.Context, now time.Time) (int, error) {
	var cfgs []*metapb.S3BucketConfig
	v, err := s.readView()
	if err != nil {
		return 0, err
	}
	err = v.scanFrom([]byte("sB/"), []byte("sB/"), func() proto.Message { return &metapb.S3BucketConfig{} }, func(m proto.Message) bool {
		if c := m.(*metapb.S3BucketConfig); len(c.Lifecycle) > 0 {
			cfgs = append(cfgs, c)
		}
		return true
	})
	v.close()
	if err != nil {
		return 0, err
	}
	lim := time.NewTicker(time.Second / time.Duration(s.cfg.LifecycleRate))
	defer lim.Stop()
	r := &lifecycleRun{s: s, ctx: ctx, now: now, lim: lim}
	for _, c := range cfgs {
		for _, rule := range c.Lifecycle {
			if !rule.Enabled {
				continue
			}
			if err := r.rule(c.Bucket, rule); err != nil {
				return r.n, err
			}
		}
	}
	return r.n, nil
}

type lifecycleRun struct {
	s   *Service
	ctx context.Context
	now time.Time
	lim *time.Ticker
	n   int
}

// act waits for the rate limit, then runs f; a refusal (a lock, a key
// changed meanwhile) skips the object, anything else ends the pass.
func (r *lifecycleRun) act(f func() error) error {
	select {
	case <-r.ctx.Done():
		return r.ctx.Err()
	case <-r.lim.C:
	}
	err := f()
	switch {
	case err == nil:
		r.n++
		return nil
	case errors.Is(errors.Permission, err), errors.Is(errors.NotExist, err), errors.Is(errors.Invalid, err),
		errors.Is(errors.Exist, err), errors.Is(errors.Precondition, err), errors.Is(errors.IsDir, err), errors.Is(errors.NotDir, err):
		return nil
	}
	return err
}

// dueAfter is when something made at ns is due days later: S3 rounds
// up to the next midnight UTC.
func dueAfter(ns int64, days int32) time.Time {
	t := time.Unix(0, ns).UTC().Add(time.Duration(days) * 24 * time.Hour)
	if d := t.Truncate(24 * time.Hour); d.Before(t) {
		return d.Add(24 * time.Hour)
	}
	return t
}

func tagsMatch(want, have map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

func (r *lifecycleRun) rule(bucket string, rule *metapb.S3LifecycleRule) error {
	if rule.ExpirationDays > 0 || rule.ExpirationDateNs > 0 {
		if err := r.expireCurrent(bucket, rule); err != nil {
			return err
		}
	}
	if rule.NoncurrentDays > 0 || rule.ExpiredObjectDeleteMarker {
		if err := r.expireVersions(bucket, rule); err != nil {
			return err
		}
	}
	if rule.AbortUploadDays > 0 {
		return r.abortUploads(bucket, rule)
	}
	return nil
}

// expireCurrent deletes the current objects due: in a versioned bucket
// the delete leaves a marker, as a user's does.
func (r *lifecycleRun) expireCurrent(bucket string, rule *metapb.S3LifecycleRule) error {
	req := &metapb.ListRequest{Ns: bucket, Prefix: rule.Prefix, Limit: 1000}
	for {
		l, err := r.s.List(r.ctx, req)
		if err != nil {
			return notExistOK(err)
		}
		for _, e := range l.Entries {
			in := e.Inode
			if e.Dir || in == nil || in.Type != metapb.FileType_REGULAR || !tagsMatch(rule.Tags, in.Tags) {
				continue
			}
			due := rule.ExpirationDateNs > 0 && r.now.UnixNano() >= rule.ExpirationDateNs ||
				rule.ExpirationDays > 0 && !r.now.Before(dueAfter(in.MtimeNs, rule.ExpirationDays))
			if !due {
				continue
			}
			if err := r.act(func() error {
				if _, err := r.s.S3Delete(r.ctx, &metapb.S3VersionRequest{Ns: bucket, Path: e.Name}); err != nil {
					return err
				}
				r.removeEmptyParents(bucket, e.Name)
				return nil
			}); err != nil {
				return err
			}
		}
		if l.NextCursor == "" {
			return nil
		}
		req.Cursor = l.NextCursor
	}
}

// removeEmptyParents removes the directories above p left empty, as the
// gateway does after a user's delete (S3 has no directories to leave).
func (r *lifecycleRun) removeEmptyParents(ns, p string) {
	for {
		i := strings.LastIndexByte(p, '/')
		if i <= 0 {
			return
		}
		p = p[:i]
		if _, err := r.s.Delete(r.ctx, &metapb.DeleteRequest{Ns: ns, Path: p}); err != nil {
			return
		}
	}
}

// expireVersions deletes noncurrent versions due (a version is
// noncurrent from the time the next newer one was made) and, with
// ExpiredObjectDeleteMarker, delete markers that are all a key has left.
// A key's versions are gathered before any is deleted, so the listing's
// markers stay valid.
func (r *lifecycleRun) expireVersions(bucket string, rule *metapb.S3LifecycleRule) error {
	var group []*metapb.S3Version
	flush := func() error {
		if len(group) == 0 {
			return nil
		}
		defer func() { group = group[:0] }()
		return r.keyVersions(bucket, rule, group)
	}
	req := &metapb.S3ListVersionsRequest{Ns: bucket, Prefix: rule.Prefix, Limit: 1000}
	for {
		l, err := r.s.S3ListVersions(r.ctx, req)
		if err != nil {
			return notExistOK(err)
		}
		for _, v := range l.Versions {
			if v.CommonPrefix {
				continue
			}
			if len(group) > 0 && group[0].Key != v.Key {
				if err := flush(); err != nil {
					return err
				}
			}
			group = append(group, v)
		}
		if !l.More || len(l.Versions) == 0 {
			return flush()
		}
		last := l.Versions[len(l.Versions)-1]
		req.KeyMarker, req.VersionIdMarker = last.Key, versionIDOf(last)
	}
}

func versionIDOf(v *metapb.S3Version) string {
	if v.NullId {
		return "null"
	}
	return VersionID(v.Order)
}

// keyVersions acts on one key's stored versions, newest first.
func (r *lifecycleRun) keyVersions(bucket string, rule *metapb.S3LifecycleRule, vs []*metapb.S3Version) error {
	cur, err := r.s.S3GetVersion(r.ctx, &metapb.S3VersionRequest{Ns: bucket, Path: vs[0].Key})
	file := err == nil && !cur.DeleteMarker
	if err != nil && !errors.Is(errors.NotExist, err) {
		return err
	}
	del := func(v *metapb.S3Version) error {
		return r.act(func() error {
			_, err := r.s.S3DeleteVersion(r.ctx, &metapb.S3VersionRequest{Ns: bucket, Path: v.Key, VersionId: versionIDOf(v)})
			return err
		})
	}
	if !file && len(vs) == 1 && vs[0].DeleteMarker {
		if rule.ExpiredObjectDeleteMarker {
			return del(vs[0])
		}
		return nil
	}
	if rule.NoncurrentDays <= 0 {
		return nil
	}
	var since int64 // when vs[i] became noncurrent: its successor's time
	first := 0
	if file {
		since = cur.Inode.GetMtimeNs()
	} else {
		first = 1 // the newest stored version is the current one (a marker)
		since = vs[0].Inode.GetMtimeNs()
	}
	for _, v := range vs[first:] {
		s := since
		since = v.Inode.GetMtimeNs()
		if !v.DeleteMarker && !tagsMatch(rule.Tags, v.Inode.GetTags()) {
			continue
		}
		if s == 0 || r.now.Before(dueAfter(s, rule.NoncurrentDays)) {
			continue
		}
		if err := del(v); err != nil {
			return err
		}
	}
	return nil
}

// abortUploads aborts the bucket's uploads initiated long enough ago.
func (r *lifecycleRun) abortUploads(bucket string, rule *metapb.S3LifecycleRule) error {
	req := &metapb.S3ListUploadsRequest{Bucket: bucket, Prefix: rule.Prefix, Limit: 1000}
	for {
		l, err := r.s.S3ListUploads(r.ctx, req)
		if err != nil {
			return err
		}
		for _, u := range l.Uploads {
			if !strings.HasPrefix(u.Key, rule.Prefix) || !tagsMatch(rule.Tags, u.Tags) ||
				r.now.Before(dueAfter(u.InitiatedNs, rule.AbortUploadDays)) {
				continue
			}
			if err := r.act(func() error {
				_, err := r.s.S3AbortUpload(r.ctx, &metapb.S3UploadRequest{Bucket: u.Bucket, Key: u.Key, UploadId: u.UploadId})
				return err
			}); err != nil {
				return err
			}
		}
		if !l.Truncated || len(l.Uploads) == 0 {
			return nil
		}
		last := l.Uploads[len(l.Uploads)-1]
		req.KeyMarker, req.UploadIdMarker = last.Key, last.UploadId
	}
}

// notExistOK: a bucket deleted since the pass began has nothing to do.
func notExistOK(err error) error {
	if errors.Is(errors.NotExist, err) {
		return nil
	}
	return err
}
