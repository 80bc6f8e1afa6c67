"""boto3 against Cairn's S3 API: versioned listing and presigned GETs,
signed with SigV4 and with SigV2 (Config(signature_version="s3"), which
also signs every call's Authorization header the V2 way).

Usage: boto3_check.py ENDPOINT BUCKET. Credentials come from the
environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY). Prints OK or
fails with a traceback.
"""
import sys
import urllib.error
import urllib.request

import boto3
from botocore.config import Config


def fetch(url):
    try:
        with urllib.request.urlopen(url) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def check(endpoint, bucket, sig):
    def client(sig):
        return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                            config=Config(signature_version=sig, s3={"addressing_style": "path"},
                                          retries={"max_attempts": 1}))
    c = client(sig)
    # Bucket sub-resource calls (?versioning, ?versions) go through SigV4:
    # Debian's botocore 1.29 signs them V2 with the sub-resource twice
    # ("/b?versioning?versioning"), a client bug later botocore fixed.
    bc = c if sig == "s3v4" or not boto3.__version__.startswith("1.26.") else client("s3v4")
    c.create_bucket(Bucket=bucket)
    bc.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    ids = [c.put_object(Bucket=bucket, Key="dir/k", Body=b"v%d" % i)["VersionId"] for i in range(3)]
    c.put_object(Bucket=bucket, Key="other", Body=b"o", Metadata={"Meta1": "x"})
    c.delete_object(Bucket=bucket, Key="other")

    # Versioned listing, one page and in pages of two.
    l = bc.list_object_versions(Bucket=bucket)
    got = [(v["Key"], v["VersionId"], v["IsLatest"]) for v in l["Versions"]]
    want = [("dir/k", ids[2], True), ("dir/k", ids[1], False), ("dir/k", ids[0], False)]
    assert got[:3] == want, got
    assert [m["Key"] for m in l["DeleteMarkers"]] == ["other"], l["DeleteMarkers"]
    assert l["DeleteMarkers"][0]["IsLatest"], l["DeleteMarkers"]
    pages = bc.get_paginator("list_object_versions").paginate(Bucket=bucket, PaginationConfig={"PageSize": 2})
    seen = []
    for p in pages:
        seen += [(v["Key"], v["VersionId"]) for v in p.get("Versions", [])]
        seen += [(m["Key"], m["VersionId"]) for m in p.get("DeleteMarkers", [])]
    assert len(seen) == 5 and len(set(seen)) == 5, seen

    # A user metadata name comes back as sent, lower-case.
    h = c.head_object(Bucket=bucket, Key="other", VersionId=[v for v in got if v[0] == "other"][0][1])
    assert h["Metadata"] == {"meta1": "x"}, h["Metadata"]

    # Presigned GETs: the current object and an older version.
    u = c.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "dir/k"}, ExpiresIn=300)
    assert ("AWSAccessKeyId=" in u) == (sig == "s3"), u
    assert fetch(u) == (200, b"v2"), fetch(u)
    u = c.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "dir/k", "VersionId": ids[0]}, ExpiresIn=300)
    assert fetch(u) == (200, b"v0"), fetch(u)
    # Tampered: another version under the same signature.
    status, _ = fetch(u.replace(ids[0], ids[1]))
    assert status == 403, status

    # Clean up by versions, as tools do.
    for v in bc.list_object_versions(Bucket=bucket)["Versions"]:
        c.delete_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])
    for m in bc.list_object_versions(Bucket=bucket).get("DeleteMarkers", []):
        c.delete_object(Bucket=bucket, Key=m["Key"], VersionId=m["VersionId"])
    c.delete_bucket(Bucket=bucket)


if __name__ == "__main__":
    endpoint, bucket = sys.argv[1], sys.argv[2]
    check(endpoint, bucket + "-v4", "s3v4")
    check(endpoint, bucket + "-v2", "s3")
    print("OK")
