"""The store front door: upstream Agent Lightning 0.3's store REST API served over agl-stream's ``StoreClient``."""
