package s3

import (
	"testing"

	"cairn/gateway/s3/policy"
)

// TestEveryRouteHasAction: a policy is evaluated for the IAM action of
// every operation; one without an action would never be denied.
func TestEveryRouteHasAction(t *testing.T) {
	var ops []string
	for _, rt := range routes {
		if rt.op != "GetBucketConfig" {
			ops = append(ops, rt.op)
		}
	}
	for _, rt := range copyRoutes {
		ops = append(ops, rt.op)
	}
	ops = append(ops, "ListObjectsV2", "PostObject")
	for _, op := range ops {
		a, ok := opActions[op]
		if !ok {
			t.Errorf("operation %s has no IAM action", op)
			continue
		}
		if _, known := policy.Actions[a]; !known && op != "ListBuckets" && op != "CreateBucket" {
			t.Errorf("operation %s's action %s is not one a policy can name", op, a)
		}
	}
	for sub, a := range notConfiguredActions {
		if _, ok := notConfigured[sub]; !ok {
			t.Errorf("%s has an action but is not a GetBucketConfig route", sub)
		}
		if _, ok := policy.Actions[a]; !ok {
			t.Errorf("%s's action %s is not one a policy can name", sub, a)
		}
	}
	for sub := range notConfigured {
		if _, ok := notConfiguredActions[sub]; !ok {
			t.Errorf("GetBucketConfig ?%s has no IAM action", sub)
		}
	}
}
