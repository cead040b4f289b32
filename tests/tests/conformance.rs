//! The official Go client's integration suite (wire contract §13), as Rust
//! checks against a secured `narad dev` process.
//!
//! The Go module `github.com/debanganthakuria/narad-go` cannot be fetched
//! from the Go module proxy here, so `scripts/go-conformance.sh` (run by
//! `.ci/run`) runs the real suite only when the proxy serves it; these
//! checks make the same requests the client makes and assert what its
//! tests assert, item by item (the numbers in the comments are §13's).
//!
//! One process serves every subtest, in order, each on its own topics, the
//! way the Go suite shares one cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use narad_tests::dev::{Answer, DevProcess, Request};
use serde_json::{Value, json};

const ADMIN_PASSWORD: &str = "conformance-admin-password";
const CLIENT: &str = "X-Narad-Client: narad-go-conformance";
/// How long a consume loop may look for its messages (the Go suite allows
/// 90 s); a ceiling, not a speed assertion.
const CONSUME_MAX: Duration = Duration::from_secs(60);

/// A client of the secured node, sending what narad-go sends on every
/// request: Basic auth and `X-Narad-Client`.
struct Client {
    port: u16,
    auth: String,
}

impl Client {
    fn new(port: u16, user: &str, password: &str) -> Self {
        let token = BASE64.encode(format!("{user}:{password}"));
        Self {
            port,
            auth: format!("Authorization: Basic {token}"),
        }
    }

    fn send(&self, method: &str, path: &str, content_type: &str, body: &[u8]) -> Answer {
        let headers = [self.auth.as_str(), CLIENT];
        let request = Request {
            method,
            path,
            content_type,
            headers: &headers,
            body,
        };
        request
            .send(self.port)
            .unwrap_or_else(|| panic!("{method} {path}: no answer"))
    }

    fn get(&self, path: &str) -> Answer {
        self.send("GET", path, "application/json", b"")
    }

    fn post_json(&self, path: &str, body: &Value) -> Answer {
        self.send(
            "POST",
            path,
            "application/json",
            body.to_string().as_bytes(),
        )
    }

    fn delete(&self, path: &str) -> Answer {
        self.send("DELETE", path, "application/json", b"")
    }
}

fn parse(answer: &Answer) -> Value {
    serde_json::from_str(&answer.body)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {}", answer.body))
}

/// A topic name of this run: `sdkit-<n>-<suffix>`, like the Go suite's.
fn topic_name(suffix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    format!("sdkit-{nanos}-{suffix}")
}

fn create_topic(client: &Client, body: &Value) -> Answer {
    client.post_json("/v1/topics", body)
}

/// `EnsureTopic`: create, and on 409 read the existing topic.
fn ensure_topic(client: &Client, body: &Value) -> Answer {
    let created = create_topic(client, body);
    if created.status != 409 {
        return created;
    }
    let name = body["name"].as_str().expect("a name");
    let described = client.get(&format!("/v1/topics/{name}"));
    if described.status == 200 {
        described
    } else {
        created
    }
}

fn delete_topic(client: &Client, name: &str) {
    let deleted = client.delete(&format!("/v1/topics/{name}"));
    assert!(
        deleted.status == 204 || deleted.status == 404,
        "delete {name}: {deleted:?}"
    );
}

fn standard_topic(client: &Client, suffix: &str, visibility_ms: u64) -> String {
    let name = topic_name(suffix);
    let created = create_topic(
        client,
        &json!({"name": name, "partitions": 3, "visibility_timeout_ms": visibility_ms}),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    name
}

/// One leased message as narad-go decodes it.
#[derive(Clone, Debug)]
struct Message {
    topic: String,
    partition: u64,
    offset: u64,
    key: Option<Vec<u8>>,
    payload: Value,
    receipt_handle: Option<String>,
}

fn decode_message(value: &Value) -> Message {
    let key = value.get("key").map(|key| {
        let text = key.as_str().expect("a string key");
        match value.get("key_encoding").and_then(Value::as_str) {
            None => text.as_bytes().to_vec(),
            Some("base64") => BASE64.decode(text).expect("base64 key"),
            Some(other) => panic!("unknown key_encoding {other}"),
        }
    });
    assert!(
        value["timestamp"]
            .as_i64()
            .is_some_and(|t| t > 1_600_000_000),
        "timestamp in Unix seconds: {value}"
    );
    Message {
        topic: value["topic"].as_str().expect("topic").to_owned(),
        partition: value["partition"].as_u64().expect("partition"),
        offset: value["offset"].as_u64().expect("offset"),
        key,
        payload: value["payload"].clone(),
        receipt_handle: value
            .get("receipt_handle")
            .and_then(Value::as_str)
            .map(str::to_owned),
    }
}

/// `Receive`: one single consume.
fn receive(client: &Client, topic: &str, wait: &str) -> Option<Message> {
    let answer = client.get(&format!("/v1/topics/{topic}/consume?wait={wait}"));
    match answer.status {
        204 => None,
        200 => {
            assert!(!answer.body.is_empty(), "200 never has an empty body");
            Some(decode_message(&parse(&answer)))
        }
        other => panic!("consume answered {other}: {}", answer.body),
    }
}

/// `Receive` where the Go suite expects a message: polled again on `204`
/// until [`CONSUME_MAX`], so a slow machine cannot fail a check of what is
/// delivered (how fast is the benchmarks' business).
fn receive_expected(client: &Client, topic: &str, wait: &str) -> Message {
    let deadline = Instant::now() + CONSUME_MAX;
    loop {
        if let Some(message) = receive(client, topic, wait) {
            return message;
        }
        assert!(Instant::now() < deadline, "no message on {topic}");
    }
}

fn ack(client: &Client, message: &Message, extend: Option<&str>) -> Answer {
    let handle = message.receipt_handle.as_deref().expect("a leased message");
    let extend = extend.map_or(String::new(), |value| format!("extend={value}&"));
    client.send(
        "POST",
        &format!(
            "/v1/topics/{}/ack?{extend}receipt_handle={handle}",
            message.topic
        ),
        "application/json",
        b"",
    )
}

/// `ReadFrom` over every partition from `oldest_offset` (the `Replay`
/// path): offset reads until `204`.
fn replay(client: &Client, topic: &str) -> Vec<Message> {
    let described = parse(&client.get(&format!("/v1/topics/{topic}")));
    let stats = described["partition_stats"]
        .as_array()
        .expect("partition_stats");
    let mut records = Vec::new();
    for (index, entry) in stats.iter().enumerate() {
        let status = entry.get("status").and_then(Value::as_str).unwrap_or("");
        assert!(status.is_empty() || status == "ok", "partition {entry}");
        let mut offset = entry["oldest_offset"].as_u64().unwrap_or(0);
        loop {
            let answer = client.get(&format!(
                "/v1/topics/{topic}/consume?offset={offset}&partition={index}"
            ));
            match answer.status {
                204 => break,
                410 => offset += 1,
                200 => {
                    let message = decode_message(&parse(&answer));
                    offset = message.offset + 1;
                    records.push(message);
                }
                other => panic!("replay read answered {other}: {}", answer.body),
            }
        }
    }
    records
}

fn cluster_is_reachable(client: &Client) {
    // 1.
    let ready = client.get("/readyz");
    assert_eq!(ready.status, 200, "{}", ready.body);
}

fn topic_lifecycle(client: &Client) {
    let name = topic_name("lifecycle");
    let body = json!({
        "name": name, "partitions": 3, "retention_ms": 7_200_000, "visibility_timeout_ms": 20_000
    });
    // 3.
    let created = create_topic(client, &body);
    assert_eq!(created.status, 201, "{}", created.body);
    let record = parse(&created);
    assert_eq!(record["name"], json!(name));
    assert_eq!(record["partitions"], json!(3));
    assert_eq!(record["visibility_timeout_ms"], json!(20_000));
    // 4.
    let mut again = body.clone();
    again["partitions"] = json!(9);
    assert_eq!(ensure_topic(client, &again).status, 200);
    // 5.
    let conflict = create_topic(client, &body);
    assert_eq!(conflict.status, 409, "{}", conflict.body);
    // 6–9.
    let described = client.get(&format!("/v1/topics/{name}"));
    assert_eq!(described.status, 200);
    let described = parse(&described);
    let stats = described["partition_stats"]
        .as_array()
        .expect("partition_stats");
    assert_eq!(stats.len(), 3, "{described}");
    for entry in stats {
        assert!(
            entry["owner_node"]
                .as_str()
                .is_some_and(|owner| !owner.is_empty())
                || entry["owner_node"].as_u64().is_some(),
            "owner_node of {entry}"
        );
        let status = entry.get("status").and_then(Value::as_str).unwrap_or("ok");
        assert_eq!(status, "ok", "{entry}");
    }
    assert_ne!(described.get("partial"), Some(&json!(true)));
    delete_topic(client, &name);
}

fn topic_names_and_retention(client: &Client) {
    // 10.
    let name = topic_name("forever");
    let created = create_topic(
        client,
        &json!({"name": name, "partitions": 3, "retention_ms": 0}),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(parse(&created)["retention_ms"], json!(0));
    // 11, 12.
    let upper = json!({"name": name.to_uppercase(), "partitions": 3});
    for answer in [create_topic(client, &upper), ensure_topic(client, &upper)] {
        assert_eq!(answer.status, 409, "{}", answer.body);
        assert!(
            answer.body.contains("differs only in letter case"),
            "{}",
            answer.body
        );
    }
    // 13.
    let long = format!("{}-{}", topic_name("long"), "x".repeat(201));
    let refused = create_topic(client, &json!({"name": long, "partitions": 3}));
    assert_eq!(refused.status, 400, "{}", refused.body);
    delete_topic(client, &name);
}

fn batch_produce_and_batch_consume(client: &Client) {
    let name = standard_topic(client, "batch", 30_000);
    // 14.
    let mut expected: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    let messages: Vec<Value> = (0..30_u8)
        .map(|i| {
            let id = format!("batch-{i}");
            let (message, key) = match i % 3 {
                0 => {
                    let key = format!("customer-{i}");
                    (
                        json!({"payload": {"id": id}, "key": key}),
                        Some(key.into_bytes()),
                    )
                }
                1 => {
                    let key = vec![0x00, i, 0x83, 0xff];
                    (
                        json!({"payload": {"id": id}, "key": BASE64.encode(&key), "key_encoding": "base64"}),
                        Some(key),
                    )
                }
                _ => (json!({"payload": {"id": id}}), None),
            };
            expected.insert(id, key);
            message
        })
        .collect();
    let produced = client.post_json(
        &format!("/v1/topics/{name}/produce/batch"),
        &json!({ "messages": messages }),
    );
    assert_eq!(produced.status, 202, "{}", produced.body);
    assert_eq!(parse(&produced)["accepted"], json!(30));
    // 15–17.
    let mut received: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    let deadline = Instant::now() + CONSUME_MAX;
    while received.len() < expected.len() {
        assert!(Instant::now() < deadline, "received {received:?}");
        let answer = client.get(&format!("/v1/topics/{name}/consume?max=10&wait=5s"));
        if answer.status == 204 {
            continue;
        }
        assert_eq!(answer.status, 200, "{}", answer.body);
        let batch = parse(&answer);
        let batch = batch["messages"].as_array().expect("a messages array");
        assert!(!batch.is_empty() && batch.len() <= 10);
        let decoded: Vec<Message> = batch.iter().map(decode_message).collect();
        let handles: Vec<&str> = decoded
            .iter()
            .map(|m| m.receipt_handle.as_deref().expect("leased"))
            .collect();
        let acked = client.post_json(
            &format!("/v1/topics/{name}/ack"),
            &json!({ "receipt_handles": handles }),
        );
        assert_eq!(acked.status, 200, "{}", acked.body);
        let results = parse(&acked);
        let results = results["results"].as_array().expect("results");
        assert_eq!(results.len(), handles.len());
        for result in results {
            assert_eq!(result["status"], json!(204), "{result}");
        }
        for message in decoded {
            let id = message.payload["id"].as_str().expect("id").to_owned();
            assert!(received.insert(id, message.key).is_none(), "distinct");
        }
    }
    assert_eq!(received, expected, "keys byte for byte");
    delete_topic(client, &name);
}

fn batch_produce_is_all_or_none(client: &Client) {
    let name = topic_name("allornone");
    let schema = json!({
        "type": "object",
        "properties": {"id": {"type": "string"}, "amount": {"type": "integer"}},
        "required": ["id", "amount"]
    });
    let created = create_topic(
        client,
        &json!({"name": name, "partitions": 3, "schema": schema}),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    // 18.
    let refused = client.post_json(
        &format!("/v1/topics/{name}/produce/batch"),
        &json!({"messages": [
            {"payload": {"id": "pay_ok", "amount": 5}},
            {"payload": {"id": "pay_bad", "amount": "lots"}}
        ]}),
    );
    assert_eq!(refused.status, 400, "{}", refused.body);
    let error = parse(&refused)["error"].as_str().unwrap_or("").to_owned();
    assert!(error.starts_with("message 1: "), "{error}");
    // 19.
    assert!(replay(client, &name).is_empty());
    delete_topic(client, &name);
}

fn produce_and_consume(client: &Client) {
    let name = standard_topic(client, "single", 30_000);
    // 20.
    for i in 0..20 {
        let produced = client.send(
            "POST",
            &format!("/v1/topics/{name}/produce?key=customer-{i}"),
            "application/json",
            json!({"n": i}).to_string().as_bytes(),
        );
        assert_eq!(produced.status, 202, "{}", produced.body);
    }
    // 21.
    let mut seen = BTreeSet::new();
    let deadline = Instant::now() + CONSUME_MAX;
    while seen.len() < 20 {
        assert!(Instant::now() < deadline, "received {seen:?}");
        if let Some(message) = receive(client, &name, "5s") {
            assert_eq!(
                message.key.as_deref(),
                Some(format!("customer-{}", message.payload["n"]).as_bytes())
            );
            assert!(seen.insert(message.payload["n"].as_u64().expect("n")));
            assert_eq!(ack(client, &message, None).status, 204);
        }
    }
    delete_topic(client, &name);
}

fn envelope(id: &str, attempts: u64, last_error: Option<&str>) -> Value {
    let mut envelope = json!({
        "_narad": 1, "id": id, "body": {"id": "pay_env", "amount": 42},
        "produced_at": 1_730_000_000_000_u64, "attempts": attempts,
        "headers": {"trace": "it-trace-1"}
    });
    if let Some(error) = last_error {
        envelope["last_error"] = json!(error);
    }
    envelope
}

fn produce_json(client: &Client, topic: &str, value: &Value) -> Answer {
    client.send(
        "POST",
        &format!("/v1/topics/{topic}/produce"),
        "application/json",
        value.to_string().as_bytes(),
    )
}

fn envelope_round_trip_and_retry(client: &Client) {
    let name = standard_topic(client, "envelope", 30_000);
    // 22–24.
    assert_eq!(
        produce_json(client, &name, &envelope("env-1", 1, None)).status,
        202
    );
    let message = receive_expected(client, &name, "5s");
    assert_eq!(message.payload["id"], json!("env-1"));
    assert_eq!(message.payload["attempts"], json!(1));
    assert_eq!(message.payload["headers"]["trace"], json!("it-trace-1"));
    assert_eq!(
        message.payload["body"],
        json!({"id": "pay_env", "amount": 42})
    );
    assert_eq!(ack(client, &message, None).status, 204);
    // 25–27.
    assert_eq!(
        produce_json(client, &name, &envelope("env-2", 1, None)).status,
        202
    );
    let original = receive_expected(client, &name, "5s");
    let copy = envelope("env-2", 2, Some("downstream refused"));
    assert_eq!(produce_json(client, &name, &copy).status, 202);
    assert_eq!(ack(client, &original, None).status, 204);
    let retried = receive_expected(client, &name, "10s");
    assert_eq!(retried.payload["attempts"], json!(2));
    assert_eq!(retried.payload["last_error"], json!("downstream refused"));
    assert_eq!(retried.payload["id"], json!("env-2"));
    assert!(
        retried.partition != original.partition || retried.offset > original.offset,
        "a new record"
    );
    assert_eq!(ack(client, &retried, None).status, 204);
    delete_topic(client, &name);
}

fn replay_reads_history_back(client: &Client) {
    let name = standard_topic(client, "replay", 30_000);
    // 28.
    for i in 0..10 {
        assert_eq!(produce_json(client, &name, &json!({"n": i})).status, 202);
    }
    let deadline = Instant::now() + CONSUME_MAX;
    let records = loop {
        let records = replay(client, &name);
        if records.len() >= 10 || Instant::now() > deadline {
            break records;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(records.len(), 10);
    // 29.
    assert!(records.iter().all(|r| r.receipt_handle.is_none()));
    // 30.
    let message = receive_expected(client, &name, "5s");
    assert_eq!(ack(client, &message, None).status, 204);
    delete_topic(client, &name);
}

fn envelope_schema_is_enforced(client: &Client) {
    let name = topic_name("envschema");
    let schema = json!({
        "type": "object",
        "properties": {
            "_narad": {"type": "integer"}, "id": {"type": "string", "minLength": 1},
            "produced_at": {"type": "integer"}, "attempts": {"type": "integer", "minimum": 1},
            "last_error": {"type": "string"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "amount": {"type": "integer", "minimum": 0}},
                "required": ["id", "amount"], "additionalProperties": false
            }
        },
        "required": ["_narad", "id", "body", "produced_at"], "additionalProperties": false
    });
    let created = create_topic(
        client,
        &json!({"name": name, "partitions": 3, "schema": schema}),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let wrap = |body: Value| json!({"_narad": 1, "id": "e", "body": body, "produced_at": 1});
    // 31–33.
    let valid = wrap(json!({"id": "pay_ok", "amount": 3}));
    assert_eq!(produce_json(client, &name, &valid).status, 202);
    let wrong = wrap(json!({"id": "pay_no", "amount": "not a number"}));
    assert_eq!(produce_json(client, &name, &wrong).status, 400);
    let plain = json!({"id": "pay_plain", "amount": 3});
    assert_eq!(produce_json(client, &name, &plain).status, 400);
    // 34.
    let message = receive_expected(client, &name, "5s");
    assert_eq!(message.payload["body"]["id"], json!("pay_ok"));
    assert_eq!(ack(client, &message, None).status, 204);
    assert!(
        receive(client, &name, "0s").is_none(),
        "nothing else stored"
    );
    delete_topic(client, &name);
}

fn errors_are_mapped(client: &Client, port: u16) {
    let missing = topic_name("missing");
    // 35, 36.
    let produced = produce_json(client, &missing, &json!({}));
    assert_eq!(produced.status, 404, "{}", produced.body);
    assert_eq!(parse(&produced)["error"], json!("topic not found"));
    assert_eq!(client.get(&format!("/v1/topics/{missing}")).status, 404);
    // 38.
    let wrong = Client::new(port, "admin", "not-the-password");
    let refused = wrong.get("/v1/topics");
    assert!(
        refused.status == 401 || refused.status == 429,
        "{refused:?}"
    );
}

fn topics_lists_our_own(client: &Client) {
    // 39.
    let names = [
        standard_topic(client, "list-a", 30_000),
        standard_topic(client, "list-b", 30_000),
    ];
    let mut listed = BTreeSet::new();
    let mut token = String::new();
    loop {
        let path = if token.is_empty() {
            "/v1/topics".to_owned()
        } else {
            format!("/v1/topics?page_token={token}")
        };
        let page = parse(&client.get(&path));
        for topic in page["topics"].as_array().expect("topics") {
            listed.insert(topic["name"].as_str().expect("name").to_owned());
        }
        token = page["next_page_token"].as_str().unwrap_or("").to_owned();
        if token.is_empty() {
            break;
        }
    }
    for name in &names {
        assert!(listed.contains(name), "{name} listed");
        delete_topic(client, name);
    }
}

fn settles_answer_as_the_client_expects(client: &Client) {
    // §13.1: extend, nack, a second ack, a malformed handle.
    let name = standard_topic(client, "settle", 30_000);
    assert_eq!(produce_json(client, &name, &json!({"n": 1})).status, 202);
    let message = receive_expected(client, &name, "5s");
    assert_eq!(ack(client, &message, Some("true")).status, 204);
    assert_eq!(ack(client, &message, Some("0")).status, 204);
    let again = receive_expected(client, &name, "5s");
    assert_eq!(again.offset, message.offset);
    assert_ne!(again.receipt_handle, message.receipt_handle);
    assert_eq!(ack(client, &message, None).status, 410, "old handle");
    assert_eq!(ack(client, &again, None).status, 204);
    let second = ack(client, &again, None);
    assert_eq!(second.status, 410, "a second ack");
    let malformed = client.send(
        "POST",
        &format!("/v1/topics/{name}/ack?receipt_handle=1:x:3"),
        "application/json",
        b"",
    );
    assert_eq!(malformed.status, 400);
    let missing = client.send(
        "POST",
        &format!("/v1/topics/{name}/ack"),
        "application/json",
        b"",
    );
    assert_eq!(missing.status, 400);
    assert!(missing.body.contains("receipt_handle required"));
    delete_topic(client, &name);
}

#[test]
fn the_go_client_integration_checks_pass_against_a_secured_dev_node() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut dev = DevProcess::secured(dir.path(), ADMIN_PASSWORD);
    dev.start();
    let client = Client::new(dev.port, "admin", ADMIN_PASSWORD);
    let unauthenticated = Request::get("/v1/topics")
        .send(dev.port)
        .expect("an answer");
    assert_eq!(unauthenticated.status, 401, "security is on");

    cluster_is_reachable(&client);
    topic_lifecycle(&client);
    topic_names_and_retention(&client);
    batch_produce_and_batch_consume(&client);
    batch_produce_is_all_or_none(&client);
    produce_and_consume(&client);
    envelope_round_trip_and_retry(&client);
    replay_reads_history_back(&client);
    envelope_schema_is_enforced(&client);
    errors_are_mapped(&client, dev.port);
    topics_lists_our_own(&client);
    settles_answer_as_the_client_expects(&client);
    dev.sigterm();
}
